"""Webhooks (admins), and the custom alerts training code sends to them."""

from __future__ import annotations

from det_hub.service import wire
from det_hub.service.handlers.base import APIHandler
from det_hub.service.webhooks import webhook_json

ID = r"(?P<webhook_id>\d+)"


class WebhooksHandler(APIHandler):
    created = frozenset({"post"})
    # The webhooks check the bodies themselves, naming every bad field.
    body = {"post": wire.WebhookCreate}
    answers = {"get": ("webhooks", list[wire.Webhook]), "post": ("webhook", wire.Webhook)}

    async def get(self) -> None:
        """List the webhooks (admins only)."""
        rows = await self.master.webhooks.list_webhooks(self.principal)
        self.send({"webhooks": [webhook_json(h) for h in rows]})

    async def post(self) -> None:
        """Register a webhook (admins only)."""
        hook = await self.master.webhooks.create(self.principal, self.json_body())
        self.send({"webhook": webhook_json(hook)}, status=201)


class WebhookHandler(APIHandler):
    answers = {"get": ("webhook", wire.Webhook), "delete": ("webhook", wire.Webhook)}

    async def get(self, webhook_id: str) -> None:
        """One webhook (admins only)."""
        hook = await self.master.webhooks.get(self.principal, int(webhook_id))
        self.send({"webhook": webhook_json(hook)})

    async def delete(self, webhook_id: str) -> None:
        """Delete a webhook (admins only); answers it as it was."""
        hook = await self.master.webhooks.delete(self.principal, int(webhook_id))
        self.send({"webhook": webhook_json(hook)})


class WebhookTestHandler(APIHandler):
    answers = {"post": wire.WebhookTest}

    async def post(self, webhook_id: str) -> None:
        """Send the webhook a test event now, once, and say whether it was answered 2xx."""
        self.send(await self.master.webhooks.test(self.principal, int(webhook_id)))


class SigningKeyHandler(APIHandler):
    answers = {"get": ("signing_key", str)}

    async def get(self) -> None:
        """The key deliveries are signed with (admins only), for receivers to check them."""
        self.send({"signing_key": self.master.webhooks.get_signing_key(self.principal)})


class TrialAlertsHandler(APIHandler):
    allow_allocation = True
    body = {"post": wire.CustomAlert}
    answers = {"post": ("alert", wire.Alert)}

    async def post(self, trial_id: str) -> None:
        """Send a custom alert to the CUSTOM webhooks (training code, the owner or an admin)."""
        trial = await self.master.experiments.get_trial(self.principal, int(trial_id))
        experiment = await self.master.experiments.get(trial.experiment_id)
        alert = await self.master.webhooks.alert(self.principal, trial, experiment,
                                                 self.json_body())
        self.send({"alert": {"title": alert.title, "description": alert.description,
                             "level": alert.level}})


routes = [
    (r"/webhooks", WebhooksHandler),
    (r"/webhooks/signing_key", SigningKeyHandler),
    (rf"/webhooks/{ID}", WebhookHandler),
    (rf"/webhooks/{ID}/test", WebhookTestHandler),
    (r"/trials/(?P<trial_id>\d+)/alerts", TrialAlertsHandler),
]
