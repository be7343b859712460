"""What the pages read from Firestore, on each request (a change's fragment
re-read is one query): the newest jobs, the newest instances, one job."""

from __future__ import annotations

from spotline.shared.adapters.firestore_store import INSTANCES, FirestoreStore
from spotline.shared.domain.documents import InstanceDoc


def recent_instances(store: FirestoreStore, limit: int) -> list[InstanceDoc]:
    """The newest instances first. The store lists instances by status, in no
    order; ``created_at`` alone has Firestore's automatic single-field index,
    so this ordered query needs no declared index (as ``recent_jobs``)."""
    from google.cloud import firestore

    query = (
        store.client.collection(INSTANCES)
        .order_by("created_at", direction=firestore.Query.DESCENDING)
        .limit(limit)
    )
    return [InstanceDoc.model_validate(snap.to_dict()) for snap in query.stream()]
