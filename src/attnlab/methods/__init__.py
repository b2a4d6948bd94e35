"""Token-interaction methods: each one a way to score how much token j feeds token i in a layer.
One module per method, each exposing one `method.Method`; `registry.METHODS` lists them all."""
