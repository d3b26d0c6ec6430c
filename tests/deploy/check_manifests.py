#!/usr/bin/python3
"""Structural checks of deploy/ (Kubernetes manifests, compose, Prometheus and
Grafana provisioning) and of the Dockerfile. Needs python3-yaml.

    check_manifests.py REPO_ROOT

Prints PASS/FAIL per check; the last line is "checker: N passed, M failed".
"""
import pathlib
import re
import sys

import yaml

GRPC_PORT = 50051
METRICS_PORT = 9464


class Results:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, cond, msg, why=""):
        if cond:
            self.passed += 1
            print(f"PASS {msg}")
        else:
            self.failed += 1
            print(f"FAIL {msg}" + (f": {why}" if why else ""))
        return bool(cond)

    def finish(self):
        print(f"checker: {self.passed} passed, {self.failed} failed")
        return 0 if self.failed == 0 else 1


def dig(obj, *path, default=None):
    for key in path:
        if isinstance(obj, dict) and key in obj:
            obj = obj[key]
        elif isinstance(obj, list) and isinstance(key, int) and -len(obj) <= key < len(obj):
            obj = obj[key]
        else:
            return default
    return obj


def duration_seconds(text):
    """'30s', '1m30s', '45' -> seconds."""
    text = str(text).strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    total, pos = 0.0, 0
    for m in re.finditer(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text):
        if m.start() != pos:
            raise ValueError(text)
        total += float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]
        pos = m.end()
    if pos != len(text) or pos == 0:
        raise ValueError(text)
    return total


def flag_value(args, name, default=None):
    for a in args or []:
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    return default


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_k8s(r, root):
    k8s = root / "deploy" / "k8s"
    docs = {}
    for path in sorted(k8s.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            kind = doc.get("kind")
            r.check(doc.get("apiVersion") and kind and
                    (kind == "Kustomization" or dig(doc, "metadata", "name")),
                    f"{path.name}: {kind} has apiVersion, kind and metadata.name")
            docs.setdefault(kind, []).append((path.name, doc))

    def one(kind):
        items = docs.get(kind, [])
        r.check(len(items) == 1, f"exactly one {kind} in deploy/k8s", f"found {len(items)}")
        return items[0][1] if items else {}

    dep = one("Deployment")
    svc = one("Service")
    smon = one("ServiceMonitor")
    hpa = one("HorizontalPodAutoscaler")
    pdb = one("PodDisruptionBudget")
    kust = one("Kustomization")
    adapter = [d for _, d in docs.get("ConfigMap", []) if "adapter" in dig(d, "metadata", "name", default="")]

    # Deployment
    pod_labels = dig(dep, "spec", "template", "metadata", "labels", default={})
    r.check(selects(dig(dep, "spec", "selector", "matchLabels"), pod_labels),
            "Deployment selector matches its pod template labels")
    pod = dig(dep, "spec", "template", "spec", default={})
    containers = pod.get("containers") or []
    c = next((x for x in containers if x.get("name") == "gpucompute"), {})
    r.check(c, "Deployment has a container named gpucompute")
    limits = dig(c, "resources", "limits", default={})
    requests = dig(c, "resources", "requests", default={})
    r.check(str(limits.get("nvidia.com/gpu")) == "1", "container limits nvidia.com/gpu: 1",
            f"limits {limits}")
    r.check(requests.get("nvidia.com/gpu") in (None, limits.get("nvidia.com/gpu")),
            "nvidia.com/gpu request (if any) equals the limit")
    r.check(requests.get("cpu") and requests.get("memory") and limits.get("memory"),
            "container requests cpu and memory and limits memory")
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
    r.check(ports.get("grpc") == GRPC_PORT and ports.get("metrics") == METRICS_PORT,
            f"container ports grpc={GRPC_PORT}, metrics={METRICS_PORT}", f"{ports}")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        p = c.get(probe) or {}
        r.check(dig(p, "grpc", "port") == GRPC_PORT and not (set(p) & {"httpGet", "exec", "tcpSocket"}),
                f"{probe} is a native gRPC probe on port {GRPC_PORT}", f"{p}")
    startup = c.get("startupProbe") or {}
    r.check(startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3) >= 60,
            "startupProbe allows at least 60 s of warm-up")
    prestop = dig(c, "lifecycle", "preStop", "exec", "command", default=[])
    sleep_s = None
    if len(prestop) == 2 and prestop[0] == "sleep":
        sleep_s = float(prestop[1])
    elif dig(c, "lifecycle", "preStop", "sleep", "seconds") is not None:
        sleep_s = float(dig(c, "lifecycle", "preStop", "sleep", "seconds"))
    r.check(sleep_s and sleep_s > 0, "preStop drains with a sleep", f"{prestop}")
    grace_flag = flag_value(c.get("args"), "grace_period", "30s")
    try:
        grace = duration_seconds(grace_flag)
    except ValueError:
        grace = None
    r.check(grace is not None, f"--grace_period={grace_flag} parses as a duration")
    tgps = pod.get("terminationGracePeriodSeconds")
    r.check(tgps and grace is not None and sleep_s and tgps > sleep_s + grace,
            "terminationGracePeriodSeconds > preStop sleep + server --grace_period",
            f"{tgps} vs {sleep_s} + {grace}")
    r.check(dig(pod, "securityContext", "runAsNonRoot") is True
            and (dig(pod, "securityContext", "runAsUser") or 0) > 0,
            "pod runs as a non-root uid")
    r.check(dig(c, "securityContext", "allowPrivilegeEscalation") is False,
            "container disallows privilege escalation")
    r.check(dig(dep, "spec", "strategy", "rollingUpdate", "maxUnavailable") == 0,
            "rolling update keeps capacity (maxUnavailable: 0)")

    # Service
    r.check(dig(svc, "spec", "clusterIP") == "None", "Service is headless (clusterIP: None)")
    r.check(selects(dig(svc, "spec", "selector"), pod_labels), "Service selects the pods")
    sports = {p.get("name"): p for p in dig(svc, "spec", "ports", default=[])}
    r.check(dig(sports, "grpc", "port") == GRPC_PORT and dig(sports, "grpc", "targetPort") in ("grpc", GRPC_PORT),
            "Service exposes grpc 50051")
    r.check("metrics" in sports, "Service exposes the metrics port")
    r.check(not dig(svc, "spec", "publishNotReadyAddresses", default=False),
            "Service publishes only ready pods")

    # ServiceMonitor
    svc_labels = dig(svc, "metadata", "labels", default={})
    r.check(selects(dig(smon, "spec", "selector", "matchLabels"), svc_labels),
            "ServiceMonitor selects the Service")
    eps = dig(smon, "spec", "endpoints", default=[])
    r.check(eps and all(e.get("port") in sports for e in eps) and
            any(e.get("path", "/metrics") == "/metrics" for e in eps),
            "ServiceMonitor scrapes a named Service port at /metrics")

    # HPA + adapter
    ref = dig(hpa, "spec", "scaleTargetRef", default={})
    r.check(ref.get("kind") == "Deployment" and ref.get("name") == dig(dep, "metadata", "name"),
            "HPA targets the Deployment")
    r.check(hpa.get("apiVersion") == "autoscaling/v2", "HPA is autoscaling/v2")
    mins, maxs = dig(hpa, "spec", "minReplicas", default=1), dig(hpa, "spec", "maxReplicas", default=0)
    r.check(1 <= mins <= maxs, "HPA 1 <= minReplicas <= maxReplicas")
    metric_names = [dig(m, "pods", "metric", "name") for m in dig(hpa, "spec", "metrics", default=[])
                    if m.get("type") == "Pods"]
    r.check("gpucompute_requests_in_flight" in metric_names,
            "HPA scales on the Pods metric gpucompute_requests_in_flight", f"{metric_names}")
    r.check(adapter, "prometheus-adapter ConfigMap present")
    served = set()
    for cm in adapter:
        for text in (cm.get("data") or {}).values():
            for rule in (yaml.safe_load(text) or {}).get("rules", []):
                if "pod" in str(rule.get("resources")) and "namespace" in str(rule.get("resources")):
                    served.add(dig(rule, "name", "as") or "")
                r.check("<<.Series>>" in rule.get("metricsQuery", "") and rule.get("seriesQuery"),
                        f"adapter rule for {dig(rule, 'name', 'as')} has seriesQuery and metricsQuery")
    r.check(set(metric_names) <= served, "every HPA Pods metric is served by an adapter rule",
            f"served {sorted(served)}")

    # Memory: requests equal limits (no overcommit; the host budget follows the limit).
    r.check(requests.get("memory") == limits.get("memory"),
            "container memory request equals its limit", f"{requests} vs {limits}")
    image = c.get("image", "")
    tag = image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else ""
    r.check("@sha256:" in image or (tag and tag != "latest"),
            "container image is pinned (a tag other than latest, or a digest)", image)
    newtags = [i.get("newTag") for i in kust.get("images") or []]
    r.check(newtags and all(t and str(t) != "latest" for t in newtags),
            "kustomization pins the image tag", f"{newtags}")
    terms = dig(pod, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                "nodeSelectorTerms", default=[])
    keys = [e.get("key") for t in terms for e in t.get("matchExpressions") or []]
    r.check(terms and all(any(str(e.get("key", "")).startswith("nvidia.com/gpu")
                              for e in t.get("matchExpressions") or []) for t in terms),
            "pods require GPU nodes (node affinity on nvidia.com/gpu labels)", f"{keys}")

    # NetworkPolicy: the API and metrics ports reachable only as listed, nothing else.
    netpol = one("NetworkPolicy")
    r.check(selects(dig(netpol, "spec", "podSelector", "matchLabels"), pod_labels),
            "NetworkPolicy selects the pods")
    r.check("Ingress" in (dig(netpol, "spec", "policyTypes") or []),
            "NetworkPolicy restricts ingress")
    allowed = {p.get("port") for rule in dig(netpol, "spec", "ingress", default=[]) or []
               for p in rule.get("ports") or []}
    r.check(allowed == {GRPC_PORT, METRICS_PORT},
            f"NetworkPolicy admits ports {GRPC_PORT} and {METRICS_PORT} only", f"{allowed}")
    r.check(all(rule.get("from") for rule in dig(netpol, "spec", "ingress", default=[]) or []),
            "every NetworkPolicy ingress rule names who may connect")

    # PDB, kustomization
    r.check(selects(dig(pdb, "spec", "selector", "matchLabels"), pod_labels), "PDB selects the pods")
    replicas = dig(dep, "spec", "replicas", default=1)
    min_available = dig(pdb, "spec", "minAvailable")
    r.check((isinstance(min_available, int) and min_available >= 1)
            or dig(pdb, "spec", "maxUnavailable") == 0,
            f"PDB cannot evict the last replica ({replicas} replica(s))",
            f"{dig(pdb, 'spec')}")
    res = kust.get("resources") or []
    r.check(res and all((k8s / f).exists() for f in res), "kustomization resources exist", f"{res}")
    for name in ("deployment.yaml", "service.yaml", "hpa.yaml", "pdb.yaml", "networkpolicy.yaml"):
        r.check(name in res, f"kustomization includes {name}")
    return dep, svc


def check_compose(r, root):
    compose = yaml.safe_load((root / "deploy" / "compose.yaml").read_text())
    svcs = compose.get("services") or {}
    for name in ("gpucompute", "prometheus", "grafana", "dcgm-exporter"):
        r.check(name in svcs, f"compose service {name}")
    g = svcs.get("gpucompute", {})
    devs = dig(g, "deploy", "resources", "reservations", "devices", default=[])
    r.check(any(d.get("driver") == "nvidia" and "gpu" in (d.get("capabilities") or []) for d in devs),
            "compose gpucompute reserves an nvidia GPU (capabilities [gpu])")
    r.check(dig(g, "build", "dockerfile") == "Dockerfile" and dig(g, "build", "context") == "..",
            "compose gpucompute builds the repo's Dockerfile")
    published = " ".join(str(p) for p in g.get("ports") or [])
    r.check(str(GRPC_PORT) in published and str(METRICS_PORT) in published,
            "compose gpucompute publishes 50051 and 9464")
    grace = duration_seconds(flag_value(g.get("command"), "grace_period", "30s"))
    r.check(duration_seconds(g.get("stop_grace_period", "10s")) > grace,
            "compose stop_grace_period > --grace_period")
    dcgm = svcs.get("dcgm-exporter", {})
    r.check(dig(dcgm, "deploy", "resources", "reservations", "devices"),
            "compose dcgm-exporter has GPU access")
    vols = " ".join(svcs.get("prometheus", {}).get("volumes") or [])
    r.check("./prometheus:/etc/prometheus" in vols, "compose prometheus mounts deploy/prometheus")
    gvols = svcs.get("grafana", {}).get("volumes") or []
    prov = next((v for v in gvols if v.startswith("./grafana/provisioning:")), None)
    dash = next((v for v in gvols if v.startswith("./grafana/dashboards:")), None)
    r.check(prov and prov.split(":")[1] == "/etc/grafana/provisioning",
            "compose grafana mounts the provisioning directory")
    providers = yaml.safe_load((root / "deploy/grafana/provisioning/dashboards/gpucompute.yml").read_text())
    ppath = dig(providers, "providers", 0, "options", "path")
    r.check(dash and dash.split(":")[1] == ppath,
            "compose grafana mounts the dashboards where the provider reads them", f"{dash} vs {ppath}")
    return svcs


def check_prometheus_grafana(r, root, svcs):
    prom = yaml.safe_load((root / "deploy/prometheus/prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in prom.get("scrape_configs", [])}
    want = {"gpucompute": f"gpucompute:{METRICS_PORT}", "dcgm": "dcgm-exporter:9400"}
    for job, target in want.items():
        targets = [t for sc in dig(jobs, job, "static_configs", default=[]) for t in sc.get("targets", [])]
        r.check(target in targets, f"prometheus job {job} scrapes {target}", f"{targets}")
        r.check(target.split(":")[0] in svcs, f"target host {target.split(':')[0]} is a compose service")
    for rf in prom.get("rule_files", []):
        r.check((root / "deploy/prometheus" / rf).exists(), f"rule file {rf} exists")
    ds = yaml.safe_load((root / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text())
    d0 = dig(ds, "datasources", 0, default={})
    r.check(d0.get("type") == "prometheus" and "prometheus:9090" in d0.get("url", ""),
            "grafana data source points at the compose prometheus")
    r.check((root / "deploy/grafana/dashboards/gpucompute.json").exists(), "dashboard JSON exists")


def check_dockerfile(r, root):
    text = (root / "Dockerfile").read_text()
    lines = [ln.strip() for ln in re.sub(r"\\\n", " ", text).splitlines()
             if ln.strip() and not ln.strip().startswith("#")]
    froms = [ln for ln in lines if ln.upper().startswith("FROM ")]
    r.check(len(froms) >= 2, "Dockerfile is multi-stage")
    r.check(any("ARG BASE_BUILD_IMAGE=nvidia/cuda:" in ln and "devel" in ln for ln in lines),
            "Dockerfile ARG BASE_BUILD_IMAGE defaults to an nvidia/cuda devel image")
    r.check(any(ln.startswith("ARG BASE_RUNTIME_IMAGE=nvidia/cuda:") for ln in lines),
            "Dockerfile ARG BASE_RUNTIME_IMAGE defaults to an nvidia/cuda image")
    r.check(froms and "${BASE_BUILD_IMAGE}" in froms[0] and "${BASE_RUNTIME_IMAGE}" in froms[-1],
            "stages are FROM the two build args")
    user = [ln.split()[1] for ln in lines if ln.upper().startswith("USER ")]
    r.check(user and user[-1].split(":")[0] not in ("root", "0"), "final stage runs as non-root")
    expose = " ".join(ln for ln in lines if ln.upper().startswith("EXPOSE "))
    r.check(str(GRPC_PORT) in expose and str(METRICS_PORT) in expose, "EXPOSE 50051 9464")
    hc = [ln for ln in lines if ln.upper().startswith("HEALTHCHECK ")]
    r.check(hc and "gpucompute-cli" in hc[-1] and "--target=localhost:50051" in hc[-1] and "health" in hc[-1],
            "HEALTHCHECK runs gpucompute-cli --target=localhost:50051 health")
    ep = [ln for ln in lines if ln.upper().startswith("ENTRYPOINT ")]
    r.check(ep and "gpucompute-server" in ep[-1] and "--address=0.0.0.0:50051" in ep[-1]
            and "--metrics_address=0.0.0.0:9464" in ep[-1], "ENTRYPOINT gpucompute-server on 0.0.0.0")
    r.check("-DBUILD_TESTING=OFF" in text and "CMAKE_BUILD_TYPE=Release" in text,
            "build stage configures Release without tests")
    di = (root / ".dockerignore").read_text().split()
    for pat in (".git", "build*"):
        r.check(pat in di or f"{pat}/" in di or f"/{pat}" in di, f".dockerignore excludes {pat}")


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    r = Results()
    check_k8s(r, root)
    svcs = check_compose(r, root)
    check_prometheus_grafana(r, root, svcs)
    check_dockerfile(r, root)
    return r.finish()


if __name__ == "__main__":
    sys.exit(main())
