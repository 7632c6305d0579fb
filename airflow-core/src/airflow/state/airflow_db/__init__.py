"""
Airflow's own metadata database, as every part of the state package reads it: the pooled
autocommit engine that state statements run on (:mod:`.engine`) and the identity of a dag run's
incarnation (:mod:`.run_identity`). It is not the default storage: ``metastore/`` builds on it as
one backend among others, and the API's task instance checks read Airflow's tables through it.
"""
