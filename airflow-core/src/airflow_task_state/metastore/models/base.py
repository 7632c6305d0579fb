"""Our own MetaData: Airflow's RunDBManager refuses external tables in core's metadata."""

from __future__ import annotations

from airflow.models.base import metadata as airflow_metadata
from airflow.models.base import naming_convention
from sqlalchemy import MetaData
from sqlalchemy.orm import registry

# Same schema and constraint names as Airflow's own tables, separate MetaData object.
metadata = MetaData(schema=airflow_metadata.schema, naming_convention=naming_convention)
mapper_registry = registry(metadata=metadata)
Base = mapper_registry.generate_base()
