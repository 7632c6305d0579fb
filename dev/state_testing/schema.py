"""How the migration tests compare a revision's tables with the ORM's: the DDL each emits."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import registry
from sqlalchemy.schema import CreateIndex, CreateTable


def table_ddl(tables: sa.MetaData, name: str, dialect_name: str) -> list[str]:
    """CREATE TABLE of *name* in *tables* for *dialect_name*, then its CREATE INDEXes in order."""
    dialect = registry.load(dialect_name)()
    table = tables.tables[name]
    indexes = sorted(str(CreateIndex(index).compile(dialect=dialect)) for index in table.indexes)
    return [str(CreateTable(table).compile(dialect=dialect)), *indexes]
