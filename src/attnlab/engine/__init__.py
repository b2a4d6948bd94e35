"""The attribution engine: models and the one point where attention is intervened on, the
integral over attention and its quadrature, encoding examples, training."""
