"""Real Helm (Helm v4's own Go SDK, through PyPI `helm-python-sdk`) for the chart tests.

    helm.py lint CHART [VALUES_FILE]    (as `helm lint --strict CHART -f VALUES_FILE`)
    helm.py install|upgrade KUBECONFIG NAMESPACE RELEASE CHART VALUES_JSON
    helm.py uninstall KUBECONFIG NAMESPACE RELEASE

Prints one JSON object on stdout; exit status 1 with the error's text on stderr when
Helm refuses.
"""

import json
import sys

import helm_python as helm
import yaml


def main(argv):
    action = argv[1]
    if action == "lint":
        values = {}
        if len(argv) > 3:
            with open(argv[3]) as f:
                values = yaml.safe_load(f) or {}
        report = helm.lint(argv[2], values, strict=True)
        print(json.dumps(report))
        return 0 if not report.get("errors") else 1
    kubeconfig, namespace, release = argv[2], argv[3], argv[4]
    config = helm.Config(kubeconfig_path=kubeconfig, namespace=namespace)
    try:
        if action in ("install", "upgrade"):
            chart = helm.Chart.load(argv[5])
            values = json.loads(argv[6])
            run = config.install if action == "install" else config.upgrade
            extra = {"create_namespace": True} if action == "install" else {}
            release = run(chart, release, values, wait="watcher", timeout=180, **extra)
            print(json.dumps({"name": release["name"], "revision": release["revision"],
                              "status": release["status"]}))
        elif action == "uninstall":
            config.uninstall(release, wait="watcher", timeout=180)
            print(json.dumps({"uninstalled": release}))
        else:
            raise SystemExit(f"unknown action {action!r}")
    except helm.HelmError as e:
        print(str(e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
