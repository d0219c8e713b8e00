"""opendnn for PyTorch users: autograd-aware ``torch.library`` operations, a functional
layer with ``torch.nn.functional``'s signatures, drop-in modules, ``convert(model)``,
``enable()`` (routing ``torch.nn.functional`` calls) and a ``torch.compile`` backend.

Every operation runs a kept opendnn graph per problem (``_graphs``): the same engines,
heuristics, plans and ``opendnn.backends`` switches as the graph API.
"""
