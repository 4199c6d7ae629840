"""kopf glue: thin handlers that gather inputs, call the core and apply the result."""
