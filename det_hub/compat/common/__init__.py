"""``determined.common`` as det_hub serves it: the parts training scripts import.

Only :mod:`determined.common.util` is provided; ``determined.common.api`` (the REST bindings)
and ``determined.common.storage`` (storage managers) have det_hub counterparts with other
names: :mod:`det_hub.client` and :mod:`det_hub.storage`.
"""
