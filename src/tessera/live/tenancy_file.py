"""``--tenancy PATH``: a tenancy in Kueue's YAML or Tessera's, for ``tessera serve`` and
``tessera simulate``.

``PATH`` is one YAML file (Kueue's objects may be several documents in it) or a folder of
``.yaml`` files (what ``tessera export kueue`` writes). The format is told by the documents:
Kubernetes objects carry ``apiVersion`` and ``kind`` (read by :mod:`tessera.live.kueue_read`),
Tessera's form is one mapping with ``queues:`` (:mod:`tessera.live.tenancy_yaml`). Either way
the result is checked before anything starts, and every error names the object and the field;
:func:`load_tenancy_file` with the cluster's flavors also refuses quota for a flavor the
cluster lacks.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tessera.errors import SpecError
from tessera.live.kueue_read import is_kueue, read_documents, tenancy_from_kueue
from tessera.live.tenancy_yaml import LoadedTenancy, tenancy_from_tessera
from tessera.model.gpus import GpuFlavor


def load_tenancy_file(path: Path, cluster_flavors: Sequence[GpuFlavor] | None = None
                      ) -> LoadedTenancy:
    """The tenancy in ``path`` (Kueue or Tessera YAML), checked against ``cluster_flavors``
    when given.

    Raises:
        SpecError: one line naming the file or the object, and the field.
    """
    docs = read_documents(path)
    if not docs:
        raise SpecError(f"{path}: no tenancy in it (no YAML documents)")
    if is_kueue(docs):
        try:
            loaded = tenancy_from_kueue(docs)
        except SpecError as e:
            raise SpecError(f"{path}: {e}") from None
    else:
        if len(docs) != 1:
            raise SpecError(f"{path}: Tessera's tenancy is one YAML document with queues:; "
                            f"this has {len(docs)} (Kueue objects need apiVersion and kind)")
        loaded = tenancy_from_tessera(docs[0][1], str(path))
    if cluster_flavors is not None:
        try:
            loaded.check(cluster_flavors)
        except SpecError as e:
            raise SpecError(f"{path}: {e}") from None
    return loaded
