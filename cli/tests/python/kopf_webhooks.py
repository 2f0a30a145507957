"""A Kopf operator (PyPI `kopf`) that registers its own admission webhooks by URL.

Run with `kopf run --standalone -A kopf_webhooks.py` and, in the environment,
KOPF_WEBHOOK_PORT, KOPF_WEBHOOK_CERT, KOPF_WEBHOOK_KEY and KOPF_WEBHOOK_CA (paths to PEM
files; the certificate names 127.0.0.1). Kopf serves the webhooks on 127.0.0.1 and keeps a
ValidatingWebhookConfiguration and a MutatingWebhookConfiguration named `auto.kopf.dev`
pointing at them (clientConfig.url, caBundle). ConfigMaps labelled `kopf-checked: "yes"`
are checked: a data key `forbidden` is refused; the others get a warning and a label.
"""

import os

import kopf


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    with open(os.environ["KOPF_WEBHOOK_CA"], "rb") as f:
        ca = f.read()
    settings.admission.server = kopf.WebhookServer(
        addr="127.0.0.1",
        port=int(os.environ["KOPF_WEBHOOK_PORT"]),
        certfile=os.environ["KOPF_WEBHOOK_CERT"],
        pkeyfile=os.environ["KOPF_WEBHOOK_KEY"],
        cadata=ca,
    )
    settings.admission.managed = "auto.kopf.dev"


@kopf.on.validate("configmaps", labels={"kopf-checked": "yes"})
def check(body, warnings, **_):
    if "forbidden" in (body.get("data") or {}):
        raise kopf.AdmissionError('kopf says no: the key "forbidden" is not allowed', code=403)
    warnings.append("checked by kopf")


@kopf.on.mutate("configmaps", labels={"kopf-checked": "yes"})
def label(patch, **_):
    patch.metadata["labels"] = {"kopf.example.com/mutated": "true"}
