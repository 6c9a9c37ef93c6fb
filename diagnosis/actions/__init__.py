"""Named actions: the only code that writes diagnosis models (STYLE.md habit 2).

One module per topic (zulip's ``zerver/actions``): each owns its writes, its transactions and
its side effects. A task an action starts after a write is sent with ``delay_on_commit`` through
:mod:`diagnosis.actions.enqueue`, so no worker ever sees a row that was rolled back. Tasks and
views stay thin and call these.
"""
