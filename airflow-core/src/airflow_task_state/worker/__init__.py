"""The worker side: what runs in task processes. Imports neither FastAPI nor the SQLAlchemy ORM."""
