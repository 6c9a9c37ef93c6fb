"""What the pages share: the menu (``navigation``), the page cache, the time range picker and the
reads of stored snapshots."""
