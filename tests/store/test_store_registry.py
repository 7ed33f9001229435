"""The model registry's queries, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid as uuidlib

import pytest

from det_hub.store import Experiment, NotFound, Store, StoreConflict, Trial, User


async def _checkpoint(store: Store, trial: Trial, steps: int, state: str = "COMPLETED") -> str:
    uuid = str(uuidlib.uuid4())
    await store.add_checkpoint(uuid=uuid, trial_id=trial.id, experiment_id=trial.experiment_id,
                               allocation_id=None, state=state, steps_completed=steps,
                               resources={"w": 10}, metadata={}, storage={})
    return uuid


async def test_models_are_created_found_listed_and_filtered(store: Store, user: User) -> None:
    bob = await store.create_user("bob")
    mnist = await store.create_model(name="mnist-cnn", owner_id=user.id, description="digits",
                                     labels=["vision", "prod"], metadata={"owner": "ml"})
    await store.create_model(name="bert_50%", owner_id=bob.id, labels=["nlp"])
    old = await store.create_model(name="old-MNIST", owner_id=user.id)
    await store.update_model(old.id, archived=True)

    found = await store.get_model("mnist-cnn")
    assert found is not None and found.id == mnist.id
    assert (found.description, found.labels, found.meta, found.archived) == (
        "digits", ["vision", "prod"], {"owner": "ml"}, False)
    assert found.creation_time == found.last_updated_time
    assert found.creation_time.tzinfo is not None
    assert await store.get_model("nope") is None
    assert (await store.get_model_by_id(mnist.id)).name == "mnist-cnn"  # type: ignore[union-attr]

    async def names(**filters: object) -> tuple[list[str], int]:
        rows, total = await store.list_models(**filters)  # type: ignore[arg-type]
        return [m.name for m in rows], total

    assert await names() == (["bert_50%", "mnist-cnn", "old-MNIST"], 3)
    assert await names(archived=False) == (["bert_50%", "mnist-cnn"], 2)
    assert await names(owner_id=user.id) == (["mnist-cnn", "old-MNIST"], 2)
    assert await names(name_contains="Mnist") == (["mnist-cnn", "old-MNIST"], 2)
    assert await names(name_contains="_50%") == (["bert_50%"], 1)
    assert await names(name_contains="t%") == ([], 0)
    assert await names(label="vision") == (["mnist-cnn"], 1)
    assert await names(label="prod", archived=False) == (["mnist-cnn"], 1)
    assert await names(label="vis") == ([], 0)
    assert await names(limit=1, offset=1) == (["mnist-cnn"], 3)


async def test_a_taken_name_is_a_conflict_and_nothing_changes(store: Store, user: User) -> None:
    first = await store.create_model(name="m", owner_id=user.id, description="first")
    with pytest.raises(StoreConflict):
        await store.create_model(name="m", owner_id=user.id, description="second")
    other = await store.create_model(name="n", owner_id=user.id)
    with pytest.raises(StoreConflict):
        await store.update_model(other.id, name="m")
    rows, total = await store.list_models()
    assert total == 2 and [(m.name, m.description) for m in rows] == [("m", "first"), ("n", "")]
    assert first.id in {m.id for m in rows}
    with pytest.raises(NotFound):
        await store.create_model(name="ghost", owner_id=9999)


async def test_updating_a_model_sets_fields_and_merges_metadata(store: Store, user: User) -> None:
    model = await store.create_model(name="m", owner_id=user.id, metadata={"a": 1, "b": 2})
    changed = await store.update_model(model.id, description="new", labels=["x"], notes="n",
                                       add_metadata={"b": 3, "c": {"d": 4}},
                                       remove_metadata=["a"])
    assert (changed.description, changed.labels, changed.notes) == ("new", ["x"], "n")
    assert changed.meta == {"b": 3, "c": {"d": 4}}
    assert changed.last_updated_time > model.last_updated_time
    assert changed.creation_time == model.creation_time
    again = await store.get_model("m")
    assert again is not None and again.meta == {"b": 3, "c": {"d": 4}}
    replaced = await store.update_model(model.id, meta={"only": True})
    assert replaced.meta == {"only": True}
    with pytest.raises(ValueError, match="owner_id"):
        await store.update_model(model.id, owner_id=user.id)
    with pytest.raises(NotFound):
        await store.update_model(9999, description="x")


async def test_versions_are_numbered_per_model(store: Store, user: User, trial: Trial) -> None:
    a, b = [await store.create_model(name=n, owner_id=user.id) for n in ("a", "b")]
    c1, c2 = await _checkpoint(store, trial, 1), await _checkpoint(store, trial, 2)
    v1 = await store.add_model_version(model_id=a.id, checkpoint_uuid=c1, owner_id=user.id,
                                       name="first", comment="c", labels=["l"],
                                       metadata={"acc": 0.9})
    v2 = await store.add_model_version(model_id=a.id, checkpoint_uuid=c2, owner_id=user.id)
    # The same checkpoint may be registered again, under another model too.
    w1 = await store.add_model_version(model_id=b.id, checkpoint_uuid=c2, owner_id=user.id)
    assert (v1.version, v2.version, w1.version) == (1, 2, 1)
    assert (v1.name, v1.comment, v1.labels, v1.meta) == ("first", "c", ["l"], {"acc": 0.9})
    assert [v.version for v in await store.list_model_versions(a.id)] == [2, 1]
    latest = await store.get_model_version(a.id)
    assert latest is not None and latest.checkpoint_uuid == c2
    first = await store.get_model_version(a.id, 1)
    assert first is not None and first.checkpoint_uuid == c1
    assert await store.get_model_version(a.id, 3) is None
    assert await store.count_model_versions([a.id, b.id, 9999]) == {a.id: 2, b.id: 1}
    # Registering counts as a change of the model.
    model = await store.get_model("a")
    assert model is not None and model.last_updated_time >= v2.creation_time

    changed = await store.update_model_version(v1.id, notes="kept", add_metadata={"f1": 0.8})
    assert changed.notes == "kept" and changed.meta == {"acc": 0.9, "f1": 0.8}
    with pytest.raises(ValueError, match="checkpoint_uuid"):
        await store.update_model_version(v1.id, checkpoint_uuid=c2)

    await store.delete_model_version(v2.id)
    with pytest.raises(NotFound):
        await store.delete_model_version(v2.id)
    assert [v.version for v in await store.list_model_versions(a.id)] == [1]
    # The number after the highest left.
    v = await store.add_model_version(model_id=a.id, checkpoint_uuid=c2, owner_id=user.id)
    assert v.version == 2


async def test_only_a_completed_existing_checkpoint_can_be_registered(
        store: Store, user: User, trial: Trial) -> None:
    model = await store.create_model(name="m", owner_id=user.id)
    writing = await _checkpoint(store, trial, 1, state="ACTIVE")
    gone = await _checkpoint(store, trial, 2, state="DELETED")
    for uuid, state in ((writing, "ACTIVE"), (gone, "DELETED")):
        with pytest.raises(StoreConflict, match=f"checkpoint {uuid} is {state}"):
            await store.add_model_version(model_id=model.id, checkpoint_uuid=uuid,
                                          owner_id=user.id)
    with pytest.raises(NotFound, match="checkpoint"):
        await store.add_model_version(model_id=model.id, checkpoint_uuid=str(uuidlib.uuid4()),
                                      owner_id=user.id)
    ok = await _checkpoint(store, trial, 3)
    with pytest.raises(NotFound, match="model"):
        await store.add_model_version(model_id=9999, checkpoint_uuid=ok, owner_id=user.id)
    assert await store.list_model_versions(model.id) == []


async def test_registered_checkpoints_are_never_claimed_for_deletion(
        store: Store, user: User, trial: Trial) -> None:
    model = await store.create_model(name="keep", owner_id=user.id)
    kept, free, writing = (await _checkpoint(store, trial, 1), await _checkpoint(store, trial, 2),
                           await _checkpoint(store, trial, 3, state="ACTIVE"))
    await store.add_model_version(model_id=model.id, checkpoint_uuid=kept, owner_id=user.id)
    await store.add_model_version(model_id=model.id, checkpoint_uuid=kept, owner_id=user.id)
    assert await store.registered_versions([kept, free]) == {kept: [("keep", 1), ("keep", 2)]}

    assert await store.claim_checkpoints_for_deletion([kept, free, writing]) == [free]
    states = {u: (await store.get_checkpoint(u)).state  # type: ignore[union-attr]
              for u in (kept, free, writing)}
    assert states == {kept: "COMPLETED", free: "DELETED", writing: "ACTIVE"}
    # Claimed once only.
    assert await store.claim_checkpoints_for_deletion([free]) == []

    # Deleting the model deletes its versions, and frees the checkpoint.
    await store.delete_model(model.id)
    assert await store.get_model("keep") is None
    assert await store.registered_versions([kept]) == {}
    assert await store.claim_checkpoints_for_deletion([kept]) == [kept]
    with pytest.raises(NotFound):
        await store.delete_model(model.id)


async def test_concurrent_registrations_take_distinct_numbers(
        store: Store, user: User, trial: Trial) -> None:
    model = await store.create_model(name="busy", owner_id=user.id)
    uuids = [await _checkpoint(store, trial, i) for i in range(6)]
    versions = await asyncio.gather(*(
        store.add_model_version(model_id=model.id, checkpoint_uuid=u, owner_id=user.id)
        for u in uuids))
    assert sorted(v.version for v in versions) == [1, 2, 3, 4, 5, 6]


async def test_a_registration_racing_a_deletion_leaves_one_winner(
        store: Store, user: User, experiment: Experiment, trial: Trial) -> None:
    model = await store.create_model(name="race", owner_id=user.id)
    for _ in range(5):
        uuid = await _checkpoint(store, trial, 1)
        register, claim = await asyncio.gather(
            store.add_model_version(model_id=model.id, checkpoint_uuid=uuid, owner_id=user.id),
            store.claim_checkpoints_for_deletion([uuid]), return_exceptions=True)
        state = (await store.get_checkpoint(uuid)).state  # type: ignore[union-attr]
        if claim == [uuid]:
            assert isinstance(register, StoreConflict) and state == "DELETED"
            assert await store.registered_versions([uuid]) == {}
        else:
            assert claim == [] and not isinstance(register, BaseException)
            assert state == "COMPLETED"
            assert await store.registered_versions([uuid]) == {uuid: [("race", register.version)]}
