"""Experiments: queries of the ``experiments`` table and of ``experiment_contexts`` (the
context archive an experiment was created with).

:class:`ExperimentQueries` is mixed into :class:`det_hub.store.Store`. A write that may change
an experiment's summary tells the store's ``experiment_listeners``; a write of its state tells
its ``experiment_state_listeners`` too.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, delete, func, insert, or_, select
from sqlalchemy.orm import Session

from det_hub.defaults import DEFAULT_PRIORITY, DEFAULT_RESOURCE_POOL

from ._common import Queries, contains_text, plain
from .columns import utcnow
from .errors import NotFound
from .models import Experiment, ExperimentContext, SearcherEvent


class ExperimentQueries(Queries):
    """Queries of the ``experiments`` and ``experiment_contexts`` tables (see :class:`Store`)."""

    if TYPE_CHECKING:
        experiment_state_listeners: list[Callable[[Experiment], None]]

    async def create_experiment(
        self,
        *,
        name: str,
        owner_id: int,
        config: dict[str, Any],
        original_config: str,
        context: bytes | None,
        state: str,
        searcher_metric: str,
        smaller_is_better: bool,
        resource_pool: str = DEFAULT_RESOURCE_POOL,
        priority: int = DEFAULT_PRIORITY,
        weight: float = 1.0,
        description: str = "",
        seed: int = 0,
        parent_id: int | None = None,
    ) -> Experiment:
        """Add an experiment, with its context archive when given; ``parent_id`` is the
        experiment it was forked from.

        Raises:
            NotFound: no such owner.
        """
        experiment = Experiment(
            name=name,
            description=description,
            owner_id=owner_id,
            state=plain(state),
            archived=False,
            progress=None,
            config=config,
            original_config=original_config,
            searcher_metric=searcher_metric,
            smaller_is_better=smaller_is_better,
            resource_pool=resource_pool,
            priority=priority,
            weight=weight,
            queue_position=None,
            seed=seed,
            searcher_state=None,
            created_at=utcnow(),
            ended_at=None,
            labels=[],
            notes="",
            parent_id=parent_id,
        )
        def add(session: Session) -> None:
            session.add(experiment)
            session.flush()
            if context is not None:
                session.add(ExperimentContext(experiment_id=experiment.id, archive=context))

        await self._write(add)
        self._experiment_changed(experiment.id)
        return experiment

    async def get_experiment(self, experiment_id: int) -> Experiment | None:
        """The experiment with this id (without its context archive)."""
        async with self._reading() as session:
            return await session.get(Experiment, experiment_id)

    async def list_experiments(
        self,
        *,
        states: list[str] | None = None,
        or_ids: Collection[int] = (),
        archived: bool | None = None,
        owner_id: int | None = None,
        name_contains: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[list[Experiment], int]:
        """One page of experiments, newest first, and how many match in all.

        ``None`` leaves a filter out; an empty ``states`` list matches nothing but the
        experiments in ``or_ids``, which pass the states filter whatever their state.
        ``name_contains`` matches names holding that text, ignoring case; ``%`` and ``_`` in
        it are plain characters.
        """
        where: list[ColumnElement[bool]] = []
        if states is not None:
            in_states = Experiment.state.in_([plain(s) for s in states])
            where.append(or_(in_states, Experiment.id.in_(list(or_ids))) if or_ids
                         else in_states)
        if archived is not None:
            where.append(Experiment.archived.is_(archived))
        if owner_id is not None:
            where.append(Experiment.owner_id == owner_id)
        if name_contains:
            where.append(contains_text(Experiment.name, name_contains))
        page = (
            select(Experiment)
            .where(*where)
            .order_by(Experiment.id.desc())
            .limit(limit)
            .offset(offset)
        )
        async with self._reading() as session:
            total = await session.scalar(select(func.count()).select_from(Experiment).where(*where))
            experiments = list(await session.scalars(page))
        return experiments, int(total or 0)

    async def list_experiments_in_states(self, states: list[str]) -> list[Experiment]:
        """Every experiment in one of these states, by id (the master's recovery at start)."""
        stmt = (
            select(Experiment)
            .where(Experiment.state.in_([plain(s) for s in states]))
            .order_by(Experiment.id)
        )
        async with self._reading() as session:
            return list(await session.scalars(stmt))

    async def update_experiment(self, experiment_id: int, **fields: Any) -> Experiment:
        """Set columns of an experiment (``state``, ``progress``, ``archived``, ...).

        Raises:
            NotFound: no such experiment.
            ValueError: a name that is not a column, or the primary key.
        """
        experiment = await self._update(Experiment, experiment_id, fields)
        self._experiment_changed(experiment_id)
        if "state" in fields:
            for listener in list(self.experiment_state_listeners):
                listener(experiment)
        return experiment

    async def add_searcher_events(self, experiment_id: int, first_seq: int,
                                  events: Sequence[Mapping[str, Any]]) -> None:
        """Append what the experiment's search method was told, numbered from ``first_seq``.

        Raises:
            StoreConflict: a number is taken.
            NotFound: no such experiment.
        """
        if not events:
            return
        rows = [{"experiment_id": experiment_id, "seq": first_seq + i, "event": dict(event)}
                for i, event in enumerate(events)]
        # Into the table itself: the ORM's bulk insert of the same rows costs twice the time.
        table: Any = SearcherEvent.__table__  # a Table; typed as any FromClause
        await self._write(lambda session: session.execute(insert(table), rows))

    async def compact_searcher(self, experiment_id: int, state: Mapping[str, Any],
                               through_seq: int) -> Experiment:
        """Store the search method's whole state, which has every event up to
        ``through_seq`` in it, and drop those events; in one transaction.

        Raises:
            NotFound: no such experiment.
        """
        def compact(session: Session) -> Experiment:
            experiment = session.get(Experiment, experiment_id)
            if experiment is None:
                raise NotFound(f"experiment {experiment_id} does not exist")
            experiment.searcher_state = dict(state)
            session.execute(delete(SearcherEvent).where(
                SearcherEvent.experiment_id == experiment_id, SearcherEvent.seq <= through_seq))
            return experiment

        experiment = await self._write(compact)
        self._experiment_changed(experiment_id)
        return experiment

    async def load_searcher(
        self, experiment_id: int
    ) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """The experiment's search method as stored: its state stored whole (None before it
        first was), and the events stored after it, in order, each with its number as
        ``seq``."""
        async with self._reading() as session:
            state = await session.scalar(
                select(Experiment.searcher_state).where(Experiment.id == experiment_id))
            after = int((state or {}).get("events_through", 0))
            rows = await session.execute(
                select(SearcherEvent.seq, SearcherEvent.event)
                .where(SearcherEvent.experiment_id == experiment_id,
                       SearcherEvent.seq > after)
                .order_by(SearcherEvent.seq))
            return state, [{**event, "seq": seq} for seq, event in rows]

    async def get_experiment_context(self, experiment_id: int) -> bytes | None:
        """The experiment's context archive, or ``None`` when it has none."""
        stmt = select(ExperimentContext.archive).where(
            ExperimentContext.experiment_id == experiment_id
        )
        async with self._reading() as session:
            return await session.scalar(stmt)


__all__ = ["ExperimentQueries"]
