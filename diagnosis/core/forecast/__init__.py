"""Start-time forecasts for pending jobs (docs/forecasts.md): the simulator replays a snapshot
forward under the cluster's own policy and quotas (``starts``), with runtimes learned per job
kind and tenant (``runtimes``); each pending job also gets the cause that blocks it and what
would unblock it (``causes``). ``backtest`` measures the forecast's error against real starts.
Pure: no Django, no I/O, no clock (time is the snapshot's ``as_of``)."""
