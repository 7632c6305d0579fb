"""Column types that behave the same on every dialect."""

from __future__ import annotations

from typing import Any

from airflow_shared.state import MAX_KEY_LENGTH
from sqlalchemy import String, Text
from sqlalchemy.dialects import mysql
from sqlalchemy.types import TypeDecorator, TypeEngine


class StateKey(TypeDecorator[str]):
    """
    A key of up to 512 characters, compared exactly on every dialect.

    MySQL and MariaDB compare text with a collation, and their default collations ignore case,
    and even their ``_bin`` ones ignore trailing spaces: "Key", "key" and "key " would all land in
    one row. There the key is stored as its UTF-8 bytes (VARBINARY, 4 bytes per character at
    most), which compare exactly.
    """

    impl = String(MAX_KEY_LENGTH)
    cache_ok = True

    def load_dialect_impl(self, dialect) -> TypeEngine[Any]:
        if dialect.name == "mysql":
            return dialect.type_descriptor(mysql.VARBINARY(4 * MAX_KEY_LENGTH))
        return dialect.type_descriptor(String(MAX_KEY_LENGTH))

    def process_bind_param(self, value, dialect):
        return value.encode("utf-8") if value is not None and dialect.name == "mysql" else value

    def process_result_value(self, value, dialect):
        return value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else value


#: Values are text of any size the database allows; TEXT on MySQL stops at 64 KiB.
StateValue = Text().with_variant(mysql.MEDIUMTEXT(), "mysql")
