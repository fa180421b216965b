"""The built-in draft architectures; importing this package registers them (see
`draft_models.registry`)."""

from . import dflash, dspark, eagle3  # noqa: F401  (registration on import)
