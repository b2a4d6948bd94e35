"""Token-interaction methods: each one a way to score how much token j feeds token i in a layer.
One module per method, named after it, with its function `score`; its `method.Method` entry in
`registry.METHODS` says what it is and what it reads."""
