"""
The step that grants a task process its first credential, for a proof: who is asking (the proof,
:mod:`.proofs`), then the try's first touch of state (what a clear left for it goes,
:mod:`airflow_task_state.airflow_db.first_touch`), in that order, before the credential exists: no
request of the try reads what its clear meant to forget. Under ``dag.test()`` the plugin does the
same for the in-process credential.
"""

from __future__ import annotations

from airflow_task_state.airflow_db.first_touch import discard_at_first_touch
from airflow_task_state.api.credentials import TaskInstanceClaims
from airflow_task_state.api.proofs import claims_for_proof


def claims_granted_for_proof(ti_id: str, verifier: str) -> TaskInstanceClaims:
    """The claims the proof of *verifier* earns (403 without it), once the try has touched state."""
    claims, row = claims_for_proof(ti_id, verifier)
    # Read by the proof's own statement: the first call pays no statement more for its first touch.
    discard_at_first_touch(row)
    return claims
