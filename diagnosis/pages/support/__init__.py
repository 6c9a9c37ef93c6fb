"""What the pages share: the menu (``navigation``), the page cache, the time range picker, the
reads of stored snapshots and the cutting of lists into pages (``pagination``)."""
