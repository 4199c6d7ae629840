"""The controllers' kernel: the work queue, the base every policy kind's controller builds
on (a queue of policy names, a few workers, fed by kopf's policy events and the cache's
changes) and the status writing every kind shares; each kind's controller is in its slice."""
