"""The fault-injection suite (`make faults`, issue 17): trainwarden against the local
cluster while the cluster misbehaves, each scenario many times with randomized timing,
and a table of what was expected, what happened, and what went wrong.

Not part of `make test`: it takes long and kills processes on purpose. Every figure comes
from the run that prints it; waits are conditions with deadlines, never sleeps.
"""
