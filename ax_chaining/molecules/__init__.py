"""Molecules as candidates: encodings and their cleaning (:mod:`.encodings`),
huge libraries as packed fingerprints (:mod:`.library`), reaction tables
(:mod:`.reactions`) and the default molecule model (:mod:`.default_model`).
rdkit, mordredcommunity and joblib come with the ``chem`` extra; rdkit and
mordred are imported on first use.
"""

from ax_chaining.molecules import default_model, encodings, library, reactions
from ax_chaining.molecules.default_model import *  # noqa: F403
from ax_chaining.molecules.encodings import *  # noqa: F403
from ax_chaining.molecules.library import *  # noqa: F403
from ax_chaining.molecules.reactions import *  # noqa: F403

__all__ = list(encodings.__all__)
__all__ += library.__all__
__all__ += reactions.__all__
__all__ += default_model.__all__
