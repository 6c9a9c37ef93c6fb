"""The pages: one module per page family (each a set of thin views). ``support/`` holds what the
pages share and is no page itself: the menu, the page cache, the time range and the snapshot
reads."""
