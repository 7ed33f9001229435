"""The webhooks' queries: the URLs the master POSTs events to, and their triggers.

:class:`WebhookQueries` is mixed into :class:`det_hub.store.Store`, as the model registry's
queries are; a webhook comes back with its triggers loaded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from ._common import Queries
from .columns import utcnow
from .errors import NotFound
from .models import Webhook, WebhookDelivery, WebhookTrigger


class WebhookQueries(Queries):
    """Queries of the ``webhooks``, ``webhook_triggers`` and ``webhook_deliveries`` tables
    (see :class:`Store`)."""

    async def create_webhook(
        self,
        *,
        url: str,
        webhook_type: str,
        triggers: Iterable[tuple[str, Mapping[str, Any]]],
        name: str = "",
        mode: str = "WORKSPACE",
    ) -> Webhook:
        """Add a webhook with its ``(trigger type, condition)`` triggers, in one transaction.

        The values are stored as given; :mod:`det_hub.service.webhooks` checks them first.
        """
        hook = Webhook(name=name, url=url, webhook_type=webhook_type, mode=mode,
                       created_at=utcnow(),
                       triggers=[WebhookTrigger(trigger_type=kind, condition=dict(condition))
                                 for kind, condition in triggers])
        await self._write(lambda session: session.add(hook))
        return hook

    async def get_webhook(self, webhook_id: int) -> Webhook | None:
        """The webhook with this id."""
        async with self._reading() as session:
            return await session.get(Webhook, webhook_id)

    async def list_webhooks(self, trigger_type: str | None = None) -> list[Webhook]:
        """Every webhook by id, or those with a trigger of this type."""
        stmt = select(Webhook).order_by(Webhook.id)
        if trigger_type is not None:
            stmt = stmt.where(Webhook.triggers.any(WebhookTrigger.trigger_type == trigger_type))
        async with self._reading() as session:
            return list(await session.scalars(stmt))

    async def delete_webhook(self, webhook_id: int) -> None:
        """Remove a webhook and its triggers.

        Raises:
            NotFound: no such webhook.
        """
        def remove(session: Session) -> None:
            session.execute(
                delete(WebhookTrigger).where(WebhookTrigger.webhook_id == webhook_id))
            session.execute(
                delete(WebhookDelivery).where(WebhookDelivery.webhook_id == webhook_id))
            result = session.execute(delete(Webhook).where(Webhook.id == webhook_id))
            if not getattr(result, "rowcount", 0):
                raise NotFound(f"webhook {webhook_id} does not exist")

        await self._write(remove)

    async def add_webhook_delivery(self, webhook_id: int, event_type: str,
                                   body: Mapping[str, Any]) -> WebhookDelivery:
        """Keep an event that is about to be sent to a webhook, until
        :meth:`remove_webhook_delivery`."""
        row = WebhookDelivery(webhook_id=webhook_id, event_type=event_type, body=dict(body),
                              created_at=utcnow())
        await self._write(lambda session: session.add(row))
        return row

    async def remove_webhook_delivery(self, delivery_id: int) -> None:
        """Forget a delivery (made, or given up); forgetting one that is gone is no error."""
        await self._write(lambda session: session.execute(
            delete(WebhookDelivery).where(WebhookDelivery.id == delivery_id)))

    async def list_webhook_deliveries(self) -> list[tuple[WebhookDelivery, Webhook]]:
        """The deliveries not yet made, oldest first, each with its webhook."""
        stmt = (select(WebhookDelivery, Webhook)
                .join(Webhook, Webhook.id == WebhookDelivery.webhook_id)
                .order_by(WebhookDelivery.id))
        async with self._reading() as session:
            return [(d, h) for d, h in (await session.execute(stmt)).all()]


__all__ = ["WebhookQueries"]
