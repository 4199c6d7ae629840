"""The policy controllers: a work queue of policy names per kind, evaluated by a few
workers, fed by kopf's policy events and the cache's changes."""
