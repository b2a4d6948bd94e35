"""Token-interaction methods: each one a way to score how much token j feeds token i in a layer."""
