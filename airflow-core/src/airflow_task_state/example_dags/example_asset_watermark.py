"""
Asset state outlives runs: each run reads the watermark the previous run left on the asset.

The task declares the asset as an outlet; asset state is only available for declared assets.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import Asset, dag, task

from airflow_task_state import asset_state

ORDERS = Asset(name="orders", uri="file:///tmp/airflow-state-example/orders")


@dag(schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["example", "asset-state"])
def example_asset_watermark():
    @task(outlets=[ORDERS])
    def load_new_orders() -> dict:
        state = asset_state[ORDERS]
        previous = state.get("watermark", default=0)
        watermark = previous + 100  # rows loaded up to here
        state.set("watermark", watermark)
        return {"previous": previous, "watermark": watermark}

    load_new_orders()


example_asset_watermark()
