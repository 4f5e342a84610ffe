"""The drivers of the core's protocol machines: each performs the command the machine returns
and reports the result back (docs/engine.md)."""
