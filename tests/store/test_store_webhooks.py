"""Webhooks and their triggers in the store (SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest

from det_hub.store import NotFound, Store


async def test_webhooks_keep_their_triggers_and_are_found_by_trigger_type(store: Store) -> None:
    done = await store.create_webhook(
        url="http://127.0.0.1:1/done", webhook_type="DEFAULT", name="done",
        triggers=[("EXPERIMENT_STATE_CHANGE", {"state": "COMPLETED"}),
                  ("EXPERIMENT_STATE_CHANGE", {"state": "ERROR"})])
    alerts = await store.create_webhook(
        url="http://127.0.0.1:1/slack", webhook_type="SLACK",
        triggers=[("CUSTOM", {})])
    assert done.id != alerts.id
    assert [(t.trigger_type, t.condition) for t in done.triggers] == [
        ("EXPERIMENT_STATE_CHANGE", {"state": "COMPLETED"}),
        ("EXPERIMENT_STATE_CHANGE", {"state": "ERROR"})]

    got = await store.get_webhook(done.id)
    assert got is not None
    assert (got.name, got.url, got.webhook_type, got.mode) == (
        "done", "http://127.0.0.1:1/done", "DEFAULT", "WORKSPACE")
    assert [t.condition["state"] for t in got.triggers] == ["COMPLETED", "ERROR"]
    assert got.created_at.tzinfo is not None

    assert [h.id for h in await store.list_webhooks()] == [done.id, alerts.id]
    assert [h.id for h in await store.list_webhooks("CUSTOM")] == [alerts.id]
    [found] = await store.list_webhooks("EXPERIMENT_STATE_CHANGE")
    assert found.id == done.id and len(found.triggers) == 2
    assert await store.list_webhooks("TASK_LOG") == []


async def test_deleting_a_webhook_takes_its_triggers_and_only_its_own(store: Store) -> None:
    a = await store.create_webhook(url="http://127.0.0.1:1/a", webhook_type="DEFAULT",
                                   triggers=[("CUSTOM", {})])
    b = await store.create_webhook(url="http://127.0.0.1:1/b", webhook_type="DEFAULT",
                                   triggers=[("CUSTOM", {"level": "error"})])
    await store.delete_webhook(a.id)
    assert await store.get_webhook(a.id) is None
    [left] = await store.list_webhooks("CUSTOM")
    assert left.id == b.id and left.triggers[0].condition == {"level": "error"}
    with pytest.raises(NotFound, match=f"webhook {a.id} does not exist"):
        await store.delete_webhook(a.id)


async def test_kept_deliveries_come_back_oldest_first_and_go_with_their_webhook(
        store: Store) -> None:
    a = await store.create_webhook(url="http://127.0.0.1:1/a", webhook_type="DEFAULT",
                                   triggers=[("CUSTOM", {})])
    b = await store.create_webhook(url="http://127.0.0.1:1/b", webhook_type="SLACK",
                                   triggers=[("CUSTOM", {})])
    first = await store.add_webhook_delivery(a.id, "CUSTOM", {"event_id": "e1", "n": 1.5})
    second = await store.add_webhook_delivery(b.id, "CUSTOM", {"text": "hi"})
    third = await store.add_webhook_delivery(a.id, "EXPERIMENT_STATE_CHANGE", {"event_id": "e3"})
    kept = await store.list_webhook_deliveries()
    assert [(d.id, h.id, h.url) for d, h in kept] == [
        (first.id, a.id, a.url), (second.id, b.id, b.url), (third.id, a.id, a.url)]
    assert kept[0][0].body == {"event_id": "e1", "n": 1.5} and kept[2][0].event_type == \
        "EXPERIMENT_STATE_CHANGE"

    await store.remove_webhook_delivery(second.id)
    await store.remove_webhook_delivery(second.id)  # gone already: no error
    await store.delete_webhook(a.id)
    assert await store.list_webhook_deliveries() == []
