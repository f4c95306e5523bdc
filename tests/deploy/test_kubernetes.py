"""The Kubernetes manifests: the collector is a native sidecar that sees the trainer's traces
and reaches the aggregator's Service; the aggregator is a Kustomize base named per job by an
overlay. Checks on the aggregator read the overlay as `kubectl kustomize` renders it; the rules
of that rendering the files rely on are also checked in Python, without kubectl."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from commscope.service.cli import EXIT_FAILED, EXIT_LOST, EXIT_USAGE
from deploycheck import DEPLOY, FLAGS, REQUIRED, require_tool

K8S = DEPLOY / "kubernetes"
TRAINING = K8S / "training-pod.yaml"
BASE = K8S / "base"
BASE_AGGREGATOR = BASE / "aggregator.yaml"
OVERLAY = K8S / "overlays" / "llama3-8b"
JOB = "llama3-8b"
JOB_LABEL = "commscope.dev/job"


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def kustomize(folder: Path) -> list[dict[str, Any]]:
    done = kubectl("kustomize", str(folder))
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@functools.cache
def _rendered() -> tuple[dict[str, Any], ...]:
    return tuple(kustomize(OVERLAY))


def aggregator_docs() -> list[dict[str, Any]]:
    """The example overlay's objects, as `kubectl kustomize` renders them."""
    return list(_rendered())


def one(kind: str) -> dict[str, Any]:
    (doc,) = [d for d in aggregator_docs() if d["kind"] == kind]
    return doc


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]
    return spec["template"]["spec"] if "template" in spec else spec


def training_pod() -> dict[str, Any]:
    (workload,) = [d for d in documents(TRAINING) if d["kind"] in {"Pod", "Job"}]
    return pod_spec(workload)


def container(spec: dict[str, Any], name: str, field: str = "containers") -> dict[str, Any]:
    (c,) = [c for c in spec.get(field, []) if c["name"] == name]
    return c


def collector() -> dict[str, Any]:
    return container(training_pod(), "commscope-collector", "initContainers")


def argv(c: dict[str, Any]) -> list[str]:
    return [*c.get("command", []), *c.get("args", [])]


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def mount_of(c: dict[str, Any], volume: str) -> str:
    (path,) = [m["mountPath"] for m in c["volumeMounts"] if m["name"] == volume]
    return str(path)


def test_collector_is_a_native_sidecar() -> None:
    spec = training_pod()
    assert collector()["restartPolicy"] == "Always"
    assert "commscope-collector" not in {c["name"] for c in spec["containers"]}


def test_trainer_and_collector_share_an_emptydir_at_one_path() -> None:
    spec = training_pod()
    trainer = container(spec, "trainer")
    empty = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
    shared = {m["name"] for m in trainer["volumeMounts"]} & {
        m["name"] for m in collector()["volumeMounts"]
    }
    (traces,) = [v for v in shared if v in empty]
    assert mount_of(trainer, traces) == mount_of(collector(), traces)


def test_collector_watches_the_shared_folder() -> None:
    spec = training_pod()
    trainer = container(spec, "trainer")
    args = argv(collector())
    watch = flag(args, "--watch")
    assert any(m["mountPath"] == watch for m in trainer["volumeMounts"])
    # TorchTitan writes <dump_folder>/<save_traces_folder>/iteration_N: that is the watch folder.
    targs = argv(trainer)
    dump = next(a.split("=", 1)[1] for a in targs if a.startswith("--job.dump_folder="))
    sub = next(a.split("=", 1)[1] for a in targs if a.startswith("--profiling.save_traces_folder="))
    assert watch == f"{dump}/{sub}"


def test_collector_runs_collect_with_known_flags() -> None:
    args = argv(collector())
    assert args[:2] == ["commscope", "collect"]
    flags = {a for a in args if a.startswith("--")}
    assert REQUIRED["collect"] <= flags <= FLAGS["collect"]


INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def test_collector_node_name_is_the_job_name_and_completion_index() -> None:
    """Unique per pod and known ahead, so each node's key pair can be made before the job."""
    c = collector()
    node = flag(argv(c), "--node")
    match = re.fullmatch(r"(.+)-\$\((\w+)\)", node)
    assert match and match[1] == "llama3-8b"
    (env,) = [e for e in c["env"] if e["name"] == match[2]]
    assert env["valueFrom"]["fieldRef"]["fieldPath"] == INDEX
    (workload,) = [d for d in documents(TRAINING) if d["kind"] == "Job"]
    assert workload["metadata"]["name"] == match[1]
    assert workload["spec"]["completionMode"] == "Indexed"


def secret_mount(spec: dict[str, Any], c: dict[str, Any], path: str) -> dict[str, Any]:
    """The volume mounted (read-only) at the folder holding `path`."""
    (mount,) = [m for m in c["volumeMounts"] if f"{path}/".startswith(f"{m['mountPath']}/")]
    assert mount.get("readOnly") is True
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    return volume


def test_collector_keys_come_from_a_secret_readable_by_its_group_only() -> None:
    spec, args = training_pod(), argv(collector())
    keys = secret_mount(spec, collector(), flag(args, "--keys"))
    assert keys["secret"]["defaultMode"] == 0o440
    assert spec["securityContext"]["fsGroup"] == collector()["securityContext"]["runAsGroup"]
    assert flag(args, "--server-key") == f"{flag(args, '--keys')}/aggregator.key"


def test_aggregator_keys_come_from_a_secret_and_the_allow_list_from_a_configmap() -> None:
    workload = one("Job")
    spec = pod_spec(workload)
    (agg,) = spec["containers"]
    args = argv(agg)
    assert secret_mount(spec, agg, flag(args, "--keys"))["secret"]["defaultMode"] == 0o440
    assert "configMap" in secret_mount(spec, agg, flag(args, "--allow"))


def test_the_documented_kubectl_commands_make_what_the_manifests_mount() -> None:
    text = BASE_AGGREGATOR.read_text(encoding="utf-8")
    made = set(re.findall(r"create (?:secret generic|configmap) ([\w-]+)", text))
    mounted = set()
    for docs in (documents(TRAINING), aggregator_docs()):
        for doc in docs:
            if doc["kind"] == "Job":
                for v in pod_spec(doc)["volumes"]:
                    ref = v.get("secret", {}).get("secretName") or v.get("configMap", {}).get(
                        "name"
                    )
                    if ref and ("keys" in ref or "allow" in ref):
                        mounted.add(ref)
    assert made == mounted
    (train_job,) = [d for d in documents(TRAINING) if d["kind"] == "Job"]
    for index in range(train_job["spec"]["completions"]):
        assert f"keys/llama3-8b-{index}.key_secret" in text  # in the collectors' Secret
        assert f"keys/llama3-8b-{index}.key " in text or f"keys/llama3-8b-{index}.key\n" in text


def test_collector_state_is_on_a_volume() -> None:
    spec = training_pod()
    state = flag(argv(collector()), "--state")
    volume = next(m["name"] for m in collector()["volumeMounts"] if m["mountPath"] == state)
    assert volume in {v["name"] for v in spec["volumes"]}


def test_collector_reaches_the_aggregator_service_on_5555() -> None:
    service = one("Service")
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    endpoint = flag(argv(collector()), "--aggregator")
    assert endpoint.startswith("tcp://")
    host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
    assert port == "5555"
    assert host in {
        name,
        f"{name}.{namespace}",
        f"{name}.{namespace}.svc",
        f"{name}.{namespace}.svc.cluster.local",
    }


def test_sidecar_has_time_to_drain() -> None:
    """The pod's grace period bounds the collector's drain after SIGTERM."""
    assert training_pod()["terminationGracePeriodSeconds"] >= 60


def test_service_exposes_zmq_and_metrics_and_is_scraped() -> None:
    service = one("Service")
    assert {p["port"] for p in service["spec"]["ports"]} == {5555, 9464}
    notes = service["metadata"]["annotations"]
    assert notes["prometheus.io/scrape"] == "true"
    assert notes["prometheus.io/port"] == "9464"


def test_service_selects_the_aggregator_pod_and_its_ports() -> None:
    service = one("Service")
    workload = one("Job")
    template = workload["spec"]["template"]
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    ports = {p["name"]: p["containerPort"] for p in template["spec"]["containers"][0]["ports"]}
    for port in service["spec"]["ports"]:
        assert ports[port["targetPort"]] == port["port"]


def test_aggregator_listens_serves_metrics_and_keeps_state_on_volumes() -> None:
    spec = pod_spec(one("Job"))
    (agg,) = spec["containers"]
    args = argv(agg)
    assert args[:2] == ["commscope", "aggregate"]
    assert REQUIRED["aggregate"] <= {a for a in args if a.startswith("--")} <= FLAGS["aggregate"]
    assert flag(args, "--listen") == "tcp://0.0.0.0:5555"
    assert flag(args, "--metrics-port") == "9464"
    volumes = {v["name"] for v in spec["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in agg["volumeMounts"]}
    for name in ("--state", "--out"):
        assert mounts[flag(args, name)] in volumes


def test_aggregator_expects_as_many_nodes_as_the_training_job_has_pods() -> None:
    (train_job,) = [d for d in documents(TRAINING) if d["kind"] == "Job"]
    args = argv(pod_spec(one("Job"))["containers"][0])
    assert flag(args, "--expect-nodes") == "$(COMMSCOPE_EXPECT_NODES)"
    assert int(job_settings()["EXPECT_NODES"]) == train_job["spec"]["parallelism"]


def job_settings() -> dict[str, str]:
    """The rendered `commscope-job` ConfigMap's data (the aggregator's env reads it)."""
    (config,) = [d for d in aggregator_docs() if d["kind"] == "ConfigMap"]
    data: dict[str, str] = config["data"]
    return data


def test_volumes_referenced_by_mounts_exist() -> None:
    for docs in (documents(TRAINING), aggregator_docs()):
        for doc in docs:
            if doc["kind"] not in {"Job", "Pod", "Deployment"}:
                continue
            spec = pod_spec(doc)
            volumes = {v["name"] for v in spec["volumes"]}
            for c in spec["containers"] + spec.get("initContainers", []):
                assert {m["name"] for m in c.get("volumeMounts", [])} <= volumes, c["name"]


def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_tool("kubectl"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("path", [TRAINING, BASE_AGGREGATOR], ids=lambda p: p.name)
def test_kubectl_reads_every_object_offline(path: Path) -> None:
    """`--local` decodes each object without a server. (No schema validation: `kubectl apply
    --dry-run=client` still asks an API server for discovery, so it cannot run here.)"""
    done = kubectl("label", "--local", "-f", str(path), "commscope-check=1", "-o", "name")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.split()) == len(documents(path))


def pod_specs() -> list[tuple[str, dict[str, Any]]]:
    train = [d for d in documents(TRAINING) if d["kind"] == "Job"]
    return [(d["metadata"]["name"], pod_spec(d)) for d in [*train, one("Job")]]


def test_every_pod_runs_under_runtime_default_seccomp_without_an_api_token() -> None:
    for name, spec in pod_specs():
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert spec["automountServiceAccountToken"] is False, name


def _liveness(c: dict[str, Any]) -> None:
    """A liveness probe on /metrics, at the port its --metrics-port serves."""
    probe = c["livenessProbe"]["httpGet"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert probe["path"] == "/metrics"
    assert str(ports[probe["port"]]) == flag(argv(c), "--metrics-port")
    # failing for longer than a slow report rebuild: periodSeconds x failureThreshold >= 60
    assert c["livenessProbe"]["periodSeconds"] * c["livenessProbe"]["failureThreshold"] >= 60


def test_aggregator_and_collector_have_a_liveness_probe_on_their_metrics() -> None:
    _liveness(pod_spec(one("Job"))["containers"][0])
    _liveness(collector())


def test_the_service_monitor_scrapes_this_job_s_service_with_its_labels_kept() -> None:
    monitor, service = one("ServiceMonitor"), one("Service")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert selector[JOB_LABEL] == JOB  # never another job's aggregator in the namespace
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics" and endpoint["honorLabels"] is True


def test_the_overlay_names_every_object_for_its_job_and_selects_only_them() -> None:
    for doc in aggregator_docs():
        meta = doc["metadata"]
        assert f"-{JOB}" in meta["name"] and meta["namespace"] == "training", meta
        assert meta["labels"][JOB_LABEL] == JOB, meta["name"]
    assert one("Service")["spec"]["selector"][JOB_LABEL] == JOB
    template = one("Job")["spec"]["template"]["metadata"]["labels"]
    assert template[JOB_LABEL] == JOB
    assert job_settings()["JOB"] == JOB
    assert "[model]" in job_settings()["job.toml"]  # the overlay's config, not the base's


def test_two_jobs_overlays_share_no_name_and_no_selector(tmp_path: Path) -> None:
    """A second job's overlay, made from the example by changing the name only."""
    shutil.copytree(BASE, tmp_path / "base")  # kustomize takes a relative base only
    shutil.copytree(K8S / "components", tmp_path / "components")
    other = tmp_path / "overlays" / "gpt-2"
    other.mkdir(parents=True)
    text = (OVERLAY / "kustomization.yaml").read_text(encoding="utf-8").replace(JOB, "gpt-2")
    (other / "kustomization.yaml").write_text(text, encoding="utf-8")
    (other / "llama3_8b.toml").write_text("[model]\nname = 'gpt2'\n", encoding="utf-8")
    second = kustomize(other)
    names = {(d["kind"], d["metadata"]["name"]) for d in aggregator_docs()}
    assert names.isdisjoint({(d["kind"], d["metadata"]["name"]) for d in second})
    (service,) = [d for d in second if d["kind"] == "Service"]
    assert service["spec"]["selector"][JOB_LABEL] == "gpt-2"


# ---- the rendering rules the files rely on, checked without kubectl


def overlay() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((OVERLAY / "kustomization.yaml").read_text())
    return loaded


def base_job() -> dict[str, Any]:
    (job,) = [d for d in documents(BASE_AGGREGATOR) if d["kind"] == "Job"]
    return job


def test_the_base_names_no_job_and_reads_its_settings_from_the_generated_configmap() -> None:
    """Kustomize suffixes names and rewrites configMapKeyRef / volume references to the
    generated ConfigMap: the base must name no job itself, only read `commscope-job`."""
    assert JOB not in yaml.safe_dump(documents(BASE_AGGREGATOR))
    spec = pod_spec(base_job())
    (agg,) = spec["containers"]
    args = argv(agg)
    assert flag(args, "--job") == "$(COMMSCOPE_JOB)"
    refs = {e["name"]: e["valueFrom"]["configMapKeyRef"] for e in agg["env"]}
    assert refs == {
        "COMMSCOPE_JOB": {"name": "commscope-job", "key": "JOB"},
        "COMMSCOPE_EXPECT_NODES": {"name": "commscope-job", "key": "EXPECT_NODES"},
    }
    (config,) = [v for v in spec["volumes"] if v["name"] == "config"]
    assert config["configMap"]["name"] == "commscope-job"
    assert flag(args, "--config") == f"{mount_of(agg, 'config')}/job.toml"


def test_the_overlay_s_suffix_label_and_settings_name_one_job() -> None:
    o = overlay()
    assert o["nameSuffix"] == f"-{JOB}" and o["resources"] == ["../../base"]
    (labels,) = o["labels"]
    assert labels == {"pairs": {JOB_LABEL: JOB}, "includeSelectors": True}
    (generated,) = o["configMapGenerator"]
    assert generated["name"] == "commscope-job" and generated["behavior"] == "merge"
    assert f"JOB={JOB}" in generated["literals"]
    (train_job,) = [d for d in documents(TRAINING) if d["kind"] == "Job"]
    expect = next(v for v in generated["literals"] if v.startswith("EXPECT_NODES="))
    assert int(expect.split("=", 1)[1].split()[0]) == train_job["spec"]["completions"]
    # the collectors point at the suffixed Service, name their job and their nodes after it
    args = argv(collector())
    host = flag(args, "--aggregator").removeprefix("tcp://").split(".")[0]
    assert host == f"commscope-aggregator{o['nameSuffix']}"
    assert flag(args, "--job") == JOB and flag(args, "--node").startswith(f"{JOB}-")


def _pointer(doc: Any, path: str) -> Any:
    for raw in path.strip("/").split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def test_the_overlay_s_patches_replace_what_they_mean_to() -> None:
    """The JSON patches address volumes by index: each must land on the key Secret and the
    allow-list of the base, and name this job's (the kubectl commands make those)."""
    (keys_patch,) = [p for p in overlay()["patches"] if p["target"]["kind"] == "Job"]
    operations = yaml.safe_load(keys_patch["patch"])
    base = base_job()
    replaced = {_pointer(base, op["path"]): op["value"] for op in operations}
    assert replaced == {
        "commscope-aggregator-keys": f"commscope-aggregator-keys-{JOB}",
        "commscope-allow": f"commscope-allow-{JOB}",
    }
    made = set(re.findall(r"create (?:secret generic|configmap) ([\w-]+)",
                          BASE_AGGREGATOR.read_text(encoding="utf-8")))  # fmt: skip
    assert set(replaced.values()) <= made


def test_without_the_operator_the_overlay_renders_without_a_service_monitor(
    tmp_path: Path,
) -> None:
    """The ServiceMonitor is a component: an overlay without it needs no Operator CRD."""
    shutil.copytree(K8S / "base", tmp_path / "base")
    shutil.copytree(K8S / "components", tmp_path / "components")
    plain = tmp_path / "overlays" / JOB
    shutil.copytree(OVERLAY, plain)
    text = (plain / "kustomization.yaml").read_text(encoding="utf-8")
    text = re.sub(r"components:\n  - \S+.*\n", "", text)
    (plain / "kustomization.yaml").write_text(text, encoding="utf-8")
    kinds = sorted(d["kind"] for d in kustomize(plain))
    assert kinds == ["ConfigMap", "Job", "PersistentVolumeClaim", "Service"]
    assert "ServiceMonitor" not in {d["kind"] for d in documents(BASE_AGGREGATOR)}


def test_the_aggregator_job_never_restarts_on_6_and_ignores_disruptions() -> None:
    """podFailurePolicy as the API server validates it (restartPolicy Never, one of
    onExitCodes / onPodConditions a rule, In values ascending, unique, never 0, the container
    named): FailJob on 2 (usage) and 6 (files lost, reports written), an evicted or
    preempted pod replaced without counting against backoffLimit; a crash (1) is retried."""
    job = one("Job")
    spec = job["spec"]
    assert pod_spec(job)["restartPolicy"] == "Never"
    fail, ignore = spec["podFailurePolicy"]["rules"]
    assert fail["action"] == "FailJob" and "onPodConditions" not in fail
    codes = fail["onExitCodes"]
    assert codes["containerName"] in {c["name"] for c in pod_spec(job)["containers"]}
    assert codes["operator"] == "In"
    assert codes["values"] == sorted(set(codes["values"])) == [EXIT_USAGE, EXIT_LOST]
    assert EXIT_FAILED not in codes["values"] and 0 not in codes["values"]
    assert ignore == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
    assert spec["backoffLimit"] >= 1


def _version() -> str:
    text = (DEPLOY.parent / "pyproject.toml").read_text(encoding="utf-8")
    (found,) = re.findall(r'^version = "([^"]+)"', text, flags=re.MULTILINE)
    return found


def test_collector_and_aggregator_run_the_image_scripts_image_sh_builds() -> None:
    """commscope:<version> (scripts/image.sh), read-only root kept."""
    for c in (collector(), container(pod_spec(one("Job")), "aggregator")):
        assert c["image"] == f"commscope:{_version()}"
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
    built = (DEPLOY.parent / "scripts" / "image.sh").read_text(encoding="utf-8")
    assert "image=${COMMSCOPE_IMAGE:-commscope:$version}" in built


def test_sidecar_workers_follow_its_cpu_limit() -> None:
    """No --jobs: the default is the CPU limit's whole CPUs (the cgroup quota), not one
    worker per host core on a GPU node."""
    c = collector()
    assert "--jobs" not in argv(c)
    assert c["resources"]["limits"]["cpu"] == "2"
