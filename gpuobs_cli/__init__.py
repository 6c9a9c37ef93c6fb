"""``gpuobs``: the SRE's command line over the REST API (docs/cli.md). A client like any script:
it imports requests and the standard library, never the server's code."""
