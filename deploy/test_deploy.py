#!/usr/bin/python3
"""Checks the deployment files in deploy/ against what they promise.

- The Kubernetes manifests (deploy/k8s/*.yaml): the Deployment runs one
  autotuned (replicas 1, Recreate) as a non-root user with its database on
  the PersistentVolumeClaim, TLS and tokens from Secrets, one GPU, a probe
  on the TLS port and a Service in front of that port; the warmup Job is
  Indexed with as many completions and parallel pods as --shard has shards,
  one GPU each, and imports each shard's results with a token.
- deploy/Containerfile: a non-root user, the database on a volume, port
  7070 exposed, autotuned as the entrypoint.
- deploy/autotuned.service: its sandboxing and directories, and that
  `systemd-analyze verify` finds nothing wrong in it (skipped without
  systemd-analyze).
- deploy/autotuned.textproto: autotuned reads it and takes every value in
  it (--print-config), and it agrees with the unit's flags.
- Every autotuned flag and every autotune command and flag these files use
  is one the built binaries' --help lists. The binaries come from $AUTOTUNED
  and $AUTOTUNE_CLI (ctest sets both); without them these checks are
  skipped.

Run: AUTOTUNED=build/service/autotuned AUTOTUNE_CLI=build/client/autotune \
  /usr/bin/python3 deploy/test_deploy.py -v
"""

import glob
import json
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import tempfile
import unittest

import yaml

DEPLOY = os.path.dirname(os.path.abspath(__file__))
K8S = os.path.join(DEPLOY, "k8s")
CONTAINERFILE = os.path.join(DEPLOY, "Containerfile")
UNIT = os.path.join(DEPLOY, "autotuned.service")
CONFIG = os.path.join(DEPLOY, "autotuned.textproto")
GPU = "nvidia.com/gpu"
SHELL_SEPARATORS = {";", "&", "&&", "||", "|", "(", ")", "{", "}", "!", "then", "do", "else"}


# --- Reading the files -------------------------------------------------------


def load_k8s():
    """[(file name, document)] of every YAML document in deploy/k8s/*.yaml."""
    docs = []
    for path in sorted(glob.glob(os.path.join(K8S, "*.yaml"))):
        with open(path, encoding="utf-8") as f:
            for doc in yaml.safe_load_all(f):
                if doc is not None:
                    docs.append((os.path.basename(path), doc))
    return docs


def one_of_kind(docs, kind):
    found = [doc for _, doc in docs if doc.get("kind") == kind]
    if len(found) != 1:
        raise AssertionError(f"expected one {kind} in deploy/k8s, found {len(found)}")
    return found[0]


def argv_of(container):
    return list(container.get("command", [])) + list(container.get("args", []))


def shell_commands(script):
    """The simple commands of a shell script, as token lists.

    Enough for the scripts in these manifests, which keep each command on
    one line (or continue it with a backslash): comments, quotes, the
    separators ; & && || | and redirections. Of the expansions, only $NAME
    and ${NAME} of a variable the script set before (NAME=VALUE alone on a
    line) are done; others stay as they are, "$x" as $x.
    """
    commands, variables = [], {}

    def expand(token):
        return re.sub(r"\$(?:\{(\w+)\}|(\w+))",
                      lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), token)

    for line in script.replace("\\\n", " ").split("\n"):
        words = shlex.split(line, comments=True)
        assignment = re.fullmatch(r"([A-Za-z_]\w*)=(.*)", words[0]) if len(words) == 1 else None
        if assignment:
            variables[assignment.group(1)] = expand(assignment.group(2))
            continue
        current = []
        for token in map(expand, words):
            if token in SHELL_SEPARATORS:
                if current:
                    commands.append(current)
                current = []
                continue
            ends_command = token.endswith(";") or (token.endswith("&") and not token.endswith(">&"))
            token = token.rstrip(";&") if ends_command else token
            if token and not re.match(r"^\d*[<>]", token):
                current.append(token)
            if ends_command and current:
                commands.append(current)
                current = []
        if current:
            commands.append(current)
    return commands


def invocations(commands, program):
    """The argument lists (argv[1:]) of every command that runs `program`."""
    found = []
    for tokens in commands:
        for i, token in enumerate(tokens):
            if posixpath.basename(token) == program:
                found.append(tokens[i + 1:])
                break
    return found


def containerfile_instructions():
    """[(instruction, arguments)] of the Containerfile, continuations joined."""
    with open(CONTAINERFILE, encoding="utf-8") as f:
        lines = f.read().split("\n")
    instructions, pending = [], ""
    for line in lines:
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        text = pending + stripped
        pending = ""
        word, _, rest = text.partition(" ")
        instructions.append((word.upper(), rest.strip()))
    return instructions


def final_stage(instructions):
    last_from = max(i for i, (word, _) in enumerate(instructions) if word == "FROM")
    return instructions[last_from:]


def exec_form(arguments):
    """The argument list of an ENTRYPOINT or CMD, exec (JSON) or shell form."""
    if arguments.startswith("["):
        return json.loads(arguments)
    return ["/bin/sh", "-c", arguments]


def unit_sections(path):
    """{section: [(key, value)]} of a systemd unit file (keys may repeat)."""
    sections, section = {}, None
    with open(path, encoding="utf-8") as f:
        text = f.read().replace("\\\n", " ")
    for line in text.split("\n"):
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        if stripped.startswith("[") and stripped.endswith("]"):
            section = stripped[1:-1]
            sections.setdefault(section, [])
            continue
        key, _, value = stripped.partition("=")
        sections.setdefault(section, []).append((key.strip(), value.strip()))
    return sections


def unit_value(entries, key):
    """The effective value of `key`: the last assignment wins."""
    values = [value for k, value in entries if k == key]
    return values[-1] if values else None


def flag_values(args, flag):
    """Every value of a --flag in args, as `--flag VALUE` or `--flag=VALUE`."""
    values = []
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            values.append(args[i + 1])
        elif arg.startswith(flag + "="):
            values.append(arg[len(flag) + 1:])
    return values


def flag_value(args, flag):
    values = flag_values(args, flag)
    return values[-1] if values else None


def under(path, directory):
    return posixpath.normpath(path).startswith(posixpath.normpath(directory).rstrip("/") + "/")


def mount_of(container, pod_spec, path):
    """The (volumeMount, volume) that holds `path`, the deepest one."""
    best = None
    for mount in container.get("volumeMounts", []):
        if under(path, mount["mountPath"]) or posixpath.normpath(path) == mount["mountPath"]:
            if best is None or len(mount["mountPath"]) > len(best["mountPath"]):
                best = mount
    if best is None:
        return None, None
    volume = next(v for v in pod_spec.get("volumes", []) if v["name"] == best["name"])
    return best, volume


def effective(pod_spec, container, key):
    """A securityContext field as it applies to the container."""
    value = container.get("securityContext", {}).get(key)
    if value is None:
        value = pod_spec.get("securityContext", {}).get(key)
    return value


def resolve_port(container, port):
    if isinstance(port, int):
        return port
    if isinstance(port, str) and port.isdigit():
        return int(port)
    for p in container.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    raise AssertionError(f"port {port!r} is not a named port of container {container['name']}")


# --- The binaries' --help ----------------------------------------------------


class Help:
    """Options and subcommands as a CLI11 --help lists them."""

    OPTION = re.compile(r"^\s+(?:-\w,)?(--[A-Za-z0-9][\w-]*)( (?:TEXT|INT|UINT|FLOAT|BOOLEAN)\b)?")

    def __init__(self, text):
        self.text = text
        self.options = {}  # --name -> takes a value
        self.subcommands = set()
        section = None
        for line in text.split("\n"):
            if re.match(r"^\S.*:$", line):
                section = line[:-1]
                continue
            if section == "Subcommands":
                # "warmup, tune": a command and its aliases.
                m = re.match(r"^\s+([a-z][\w-]*(?:, [a-z][\w-]*)*)\s", line + " ")
                if m:
                    self.subcommands.update(m.group(1).split(", "))
            elif section == "Options":
                m = self.OPTION.match(line)
                if m:
                    self.options[m.group(1)] = m.group(2) is not None


def run_help(argv):
    result = subprocess.run(argv + ["--help"], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} --help exited {result.returncode}: {result.stderr}")
    return Help(result.stdout)


def binaries_or_skip():
    daemon, cli = os.environ.get("AUTOTUNED"), os.environ.get("AUTOTUNE_CLI")
    if not daemon or not cli:
        raise unittest.SkipTest(
            "AUTOTUNED and AUTOTUNE_CLI are not set: set them to the built autotuned and "
            "autotune (ctest does) to check the flags these files use against --help")
    for name, path in (("AUTOTUNED", daemon), ("AUTOTUNE_CLI", cli)):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise unittest.SkipTest(f"{name}={path} is not an executable file; build it first")
    return daemon, cli


# --- (a) The Kubernetes manifests --------------------------------------------


class KubernetesManifests(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.docs = load_k8s()
        cls.deployment = one_of_kind(cls.docs, "Deployment")
        cls.service = one_of_kind(cls.docs, "Service")
        cls.job = one_of_kind(cls.docs, "Job")
        cls.pod = cls.deployment["spec"]["template"]["spec"]
        cls.daemon = next(c for c in cls.pod["containers"] if c["name"] == "autotuned")
        cls.daemon_args = argv_of(cls.daemon)

    def test_every_document_is_namespace_less_and_defines_no_secret(self):
        self.assertTrue(self.docs, "no YAML documents in deploy/k8s")
        for name, doc in self.docs:
            with self.subTest(file=name, kind=doc.get("kind")):
                for key in ("apiVersion", "kind", "metadata"):
                    self.assertIn(key, doc)
                self.assertIn("name", doc["metadata"])
                self.assertNotEqual(doc["kind"], "Namespace")
                self.assertNotIn("namespace", doc["metadata"],
                                 "the manifests name no namespace (kubectl apply -n)")
                self.assertNotEqual(doc["kind"], "Secret",
                                    "Secrets are referenced, their values never kept here")

    def test_deployment_runs_one_pod_and_recreates_it(self):
        self.assertEqual(self.deployment["spec"]["replicas"], 1)
        self.assertEqual(self.deployment["spec"]["strategy"]["type"], "Recreate")

    def test_deployment_runs_autotuned(self):
        self.assertEqual(posixpath.basename(self.daemon_args[0]), "autotuned")
        self.assertNotIn("--insecure", self.daemon_args)

    def test_database_is_on_the_persistent_volume_claim(self):
        db = flag_value(self.daemon_args, "--db")
        self.assertIsNotNone(db, "autotuned is given --db")
        mount, volume = mount_of(self.daemon, self.pod, db)
        self.assertIsNotNone(mount, f"no volume is mounted where --db {db} lies")
        self.assertEqual(mount["mountPath"], posixpath.dirname(db),
                         "the claim is mounted at the --db directory")
        self.assertFalse(mount.get("readOnly", False))
        self.assertIn("persistentVolumeClaim", volume, f"{mount['mountPath']} is not the claim")
        claims = [doc["metadata"]["name"] for _, doc in self.docs
                  if doc["kind"] == "PersistentVolumeClaim"]
        self.assertIn(volume["persistentVolumeClaim"]["claimName"], claims,
                      "the claim is defined in deploy/k8s")

    def test_written_paths_are_volumes_under_a_read_only_root(self):
        self.check_writable(self.pod, self.daemon, self.daemon_args, [])

    def test_deployment_pod_is_non_root_without_privilege_escalation(self):
        self.check_security(self.pod, self.daemon)

    def test_deployment_container_has_one_gpu(self):
        self.check_gpu(self.daemon)

    def test_tls_and_tokens_come_from_secrets(self):
        for flag in ("--tls-cert", "--tls-key", "--token-file"):
            with self.subTest(flag=flag):
                path = flag_value(self.daemon_args, flag)
                self.assertIsNotNone(path, f"autotuned is given {flag}")
                mount, volume = mount_of(self.daemon, self.pod, path)
                self.assertIsNotNone(mount, f"{flag} {path} is on no volume")
                self.assertIn("secret", volume, f"{flag} {path} is not from a Secret")
                self.assertTrue(mount.get("readOnly", False))

    def test_tcp_port_is_the_container_port_and_the_probes_port(self):
        tcp = [a for a in flag_values(self.daemon_args, "--listen") if not a.startswith("unix://")]
        self.assertEqual(len(tcp), 1, f"one TCP --listen, got {tcp}")
        port = int(tcp[0].rsplit(":", 1)[1])
        self.assertEqual(port, 7070)
        self.assertIn(port, [p["containerPort"] for p in self.daemon.get("ports", [])])
        for probe in ("readinessProbe", "livenessProbe"):
            with self.subTest(probe=probe):
                self.assertIn(probe, self.daemon)
                # The kubelet's grpc probe cannot do TLS, and the port serves
                # only TLS.
                self.assertNotIn("grpc", self.daemon[probe])
                self.assertIn("tcpSocket", self.daemon[probe])
                self.assertEqual(resolve_port(self.daemon, self.daemon[probe]["tcpSocket"]["port"]),
                                 port)

    def test_service_exposes_the_container_port(self):
        spec = self.service["spec"]
        self.assertEqual(spec.get("type", "ClusterIP"), "ClusterIP")
        labels = self.deployment["spec"]["template"]["metadata"]["labels"]
        for key, value in spec["selector"].items():
            self.assertEqual(labels.get(key), value, "the Service selects the Deployment's pods")
        self.assertEqual(len(spec["ports"]), 1)
        port = spec["ports"][0]
        self.assertEqual(port["port"], 7070)
        target = resolve_port(self.daemon, port.get("targetPort", port["port"]))
        self.assertIn(target, [p["containerPort"] for p in self.daemon["ports"]])
        self.assertIn(f"0.0.0.0:{target}", flag_values(self.daemon_args, "--listen"))

    # The warmup Job.

    def job_parts(self):
        pod = self.job["spec"]["template"]["spec"]
        self.assertEqual(len(pod["containers"]), 1)
        container = pod["containers"][0]
        argv = argv_of(container)
        self.assertEqual(argv[:2], ["/bin/sh", "-c"], "the Job runs a shell script")
        # The kubelet expands $(VAR) in a command and turns $$ into $.
        self.assertNotIn("$$", argv[2], "the kubelet would turn $$ into $")
        return pod, container, shell_commands(argv[2])

    def test_job_is_indexed_with_one_shard_per_pod(self):
        spec = self.job["spec"]
        self.assertEqual(spec.get("completionMode"), "Indexed")
        _, _, commands = self.job_parts()
        warmups = [a for a in invocations(commands, "autotune") if "warmup" in a or "tune" in a]
        self.assertEqual(len(warmups), 1, "the script runs one warmup")
        shard = flag_value(warmups[0], "--shard")
        self.assertIsNotNone(shard, "warmup is given --shard")
        m = re.fullmatch(r"\$\(JOB_COMPLETION_INDEX\)/(\d+)", shard)
        self.assertIsNotNone(m, f"--shard {shard} is not $(JOB_COMPLETION_INDEX)/N")
        shards = int(m.group(1))
        self.assertEqual(spec["completions"], shards)
        self.assertEqual(spec["parallelism"], shards)

    def test_job_pods_have_one_gpu_each(self):
        _, container, _ = self.job_parts()
        self.check_gpu(container)

    def test_job_pod_is_non_root_without_privilege_escalation(self):
        pod, container, _ = self.job_parts()
        self.check_security(pod, container)
        self.assertIn(pod.get("restartPolicy"), ("Never", "OnFailure"))

    def tune_and_import(self, commands):
        clients = invocations(commands, "autotune")
        tunes = [a for a in clients if "tune" in a]
        imports = [a for a in clients if "import" in a]
        self.assertEqual(len(tunes), 1, "the script runs one tune")
        self.assertEqual(len(imports), 1, "the script runs one import")
        return tunes[0], imports[0]

    def test_job_tunes_on_a_private_daemon_and_imports_with_a_token(self):
        pod, container, commands = self.job_parts()
        self.assertEqual(invocations(commands, "autotuned"), [],
                         "tune --local starts the daemon itself")
        tune, push = self.tune_and_import(commands)
        # Tuned on a private daemon, which writes the bundle...
        self.assertIn("--local", tune)
        self.assertIsNone(flag_value(tune, "--server"), "tune --local needs no --server")
        manifest = [w for w in tune[tune.index("tune") + 1:] if not w.startswith("-")][0]
        mount, volume = mount_of(container, pod, manifest)
        self.assertIsNotNone(mount, f"the manifest {manifest} is on no volume")
        self.assertIn("configMap", volume)
        bundle = flag_value(tune, "--bundle")
        self.assertIsNotNone(bundle, "tune is given --bundle")
        # ...imported into the central service, over TLS, with a token.
        positional = [word for word in push[push.index("import") + 1:] if not word.startswith("-")]
        self.assertEqual(positional[:1], [bundle], "import reads what tune wrote")
        # Shards of one fleet never put a contended entry over a clean one.
        self.assertIn("--keep-better", push)
        self.assertEqual(
            flag_value(push, "--server"),
            f"{self.service['metadata']['name']}:{self.service['spec']['ports'][0]['port']}",
            "import goes to the Service")
        self.assertTrue("--tls" in push or flag_value(push, "--tls-ca") is not None)
        token = flag_value(push, "--token-file")
        self.assertIsNotNone(token, "import is given --token-file")
        mount, volume = mount_of(container, pod, token)
        self.assertIsNotNone(mount, f"the token {token} is on no volume")
        self.assertIn("secret", volume, "the token comes from a Secret")
        ca = flag_value(push, "--tls-ca")
        if ca is not None:
            self.assertIsNotNone(mount_of(container, pod, ca)[0], f"the CA {ca} is on no volume")

    def test_job_writes_only_to_volumes(self):
        pod, container, commands = self.job_parts()
        tune, _ = self.tune_and_import(commands)
        self.assertIs(effective(pod, container, "readOnlyRootFilesystem"), True)
        # The private daemon's folder is made in $TMPDIR, else /tmp.
        tmp = next((e["value"] for e in container.get("env", []) if e["name"] == "TMPDIR"), "/tmp")
        for path in [f"{tmp}/autotune-local-x/cache.db", "/tmp/autotune-gpu-leases/lock",
                     flag_value(tune, "--bundle")]:
            with self.subTest(path=path):
                mount, _ = mount_of(container, pod, path)
                self.assertIsNotNone(mount, f"{path} would be on the read-only root")
                self.assertFalse(mount.get("readOnly", False), f"{path} is on a read-only volume")

    # Shared checks.

    def check_writable(self, pod, container, daemon_args, more_paths):
        """What autotuned (and the script) write lies on writable volumes."""
        self.assertIs(effective(pod, container, "readOnlyRootFilesystem"), True)
        sockets = [a[len("unix://"):] for a in flag_values(daemon_args, "--listen")
                   if a.startswith("unix://")]
        written = sockets + [flag_value(daemon_args, "--db"), "/tmp/autotune-gpu-leases/lock"]
        for path in written + more_paths:
            with self.subTest(path=path):
                self.assertIsNotNone(path)
                mount, _ = mount_of(container, pod, path)
                self.assertIsNotNone(mount, f"{path} would be on the read-only root")
                self.assertFalse(mount.get("readOnly", False), f"{path} is on a read-only volume")

    def check_security(self, pod, container):
        self.assertIs(effective(pod, container, "runAsNonRoot"), True)
        self.assertIs(container.get("securityContext", {}).get("allowPrivilegeEscalation"), False)
        user = effective(pod, container, "runAsUser")
        if user is not None:
            self.assertNotEqual(user, 0)

    def check_gpu(self, container):
        limits = container.get("resources", {}).get("limits", {})
        self.assertEqual(int(limits.get(GPU, 0)), 1, f"limits.{GPU} is 1")
        requests = container.get("resources", {}).get("requests", {})
        if GPU in requests:
            self.assertEqual(int(requests[GPU]), 1,
                             "an extended resource's request equals its limit")


# --- (a) The Containerfile ---------------------------------------------------


class ContainerfileChecks(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.all = containerfile_instructions()
        cls.final = final_stage(cls.all)

    def last(self, word):
        found = [args for w, args in self.final if w == word]
        self.assertTrue(found, f"the final stage has no {word}")
        return found[-1]

    def entrypoint_argv(self):
        argv = exec_form(self.last("ENTRYPOINT"))
        cmd = [args for w, args in self.final if w == "CMD"]
        return argv + (exec_form(cmd[-1]) if cmd else [])

    def test_multi_stage_build_installs_to_opt_autotune(self):
        froms = [args for w, args in self.all if w == "FROM"]
        self.assertGreaterEqual(len(froms), 2)
        build = [args for w, args in self.all[:self.all.index(self.final[0])] if w == "RUN"]
        self.assertTrue(any("deploy/install-deps.sh" in r for r in build))
        self.assertTrue(any("CMAKE_BUILD_TYPE=Release" in r for r in build))
        self.assertTrue(any("cmake --install build --prefix /opt/autotune" in r for r in build))
        copies = [args for w, args in self.final if w == "COPY"]
        self.assertTrue(any(c.startswith("--from=") and "/opt/autotune" in c for c in copies))
        runs = " ".join(args for w, args in self.final if w == "RUN")
        self.assertRegex(runs, r"cuda-nvrtc-", "the final stage installs NVRTC")

    def test_runs_as_a_numeric_non_root_user(self):
        user = self.last("USER").split(":")[0]
        self.assertTrue(user.isdigit(), "a numeric USER, so that runAsNonRoot can check it")
        self.assertNotEqual(int(user), 0)
        for _, doc in load_k8s():
            pod = doc.get("spec", {}).get("template", {}).get("spec")
            if pod and "runAsUser" in pod.get("securityContext", {}):
                self.assertEqual(pod["securityContext"]["runAsUser"], int(user),
                                 f"{doc['kind']} runs as the image's user")

    def test_database_on_the_volume_and_port_exposed(self):
        argv = self.entrypoint_argv()
        self.assertEqual(argv[0], "/opt/autotune/bin/autotuned")
        db = flag_value(argv, "--db")
        self.assertIsNotNone(db)
        volumes = self.last("VOLUME")
        volumes = json.loads(volumes) if volumes.startswith("[") else volumes.split()
        self.assertIn(posixpath.dirname(db), volumes)
        self.assertIn("unix:///run/autotune/autotune.sock", flag_values(argv, "--listen"))
        exposed = self.last("EXPOSE").split()
        self.assertIn("7070", [e.split("/")[0] for e in exposed])
        self.assertIn("0.0.0.0:7070", flag_values(argv, "--listen"))
        self.assertNotIn("--insecure", argv)


# --- (b) Flags against the binaries' --help ----------------------------------


class FlagsExist(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.daemon_bin, cls.cli_bin = binaries_or_skip()
        cls.daemon_help = run_help([cls.daemon_bin])
        cls.cli_help = run_help([cls.cli_bin])
        cls.sub_help = {}

    def daemon_command_lines(self):
        """(where, argv[1:]) of every autotuned command line in deploy/."""
        lines = []
        final = final_stage(containerfile_instructions())
        entry = [exec_form(a) for w, a in final if w == "ENTRYPOINT"]
        cmd = [exec_form(a) for w, a in final if w == "CMD"]
        if entry:
            lines.append(("Containerfile ENTRYPOINT and CMD",
                          entry[-1][1:] + (cmd[-1] if cmd else [])))
        service = unit_sections(UNIT).get("Service", [])
        for key in ("ExecStart",):
            value = unit_value(service, key)
            if value:
                lines.append((f"autotuned.service {key}", shlex.split(value)[1:]))
        for name, doc in load_k8s():
            pod = doc.get("spec", {}).get("template", {}).get("spec", {})
            for container in pod.get("containers", []):
                argv = argv_of(container)
                if argv and posixpath.basename(argv[0]) == "autotuned":
                    lines.append((f"{name} {container['name']}", argv[1:]))
                elif argv[:2] == ["/bin/sh", "-c"]:
                    for args in invocations(shell_commands(argv[2]), "autotuned"):
                        lines.append((f"{name} {container['name']} script", args))
        return lines

    def cli_command_lines(self):
        lines = []
        for name, doc in load_k8s():
            pod = doc.get("spec", {}).get("template", {}).get("spec", {})
            for container in pod.get("containers", []):
                argv = argv_of(container)
                if argv[:2] == ["/bin/sh", "-c"]:
                    for args in invocations(shell_commands(argv[2]), "autotune"):
                        lines.append((f"{name} {container['name']} script", args))
        return lines

    def check_flags(self, where, args, options):
        i = 0
        while i < len(args):
            arg = args[i]
            if arg.startswith("--"):
                name = arg.split("=", 1)[0]
                self.assertIn(name, options, f"{where}: {name} is not in --help")
                if options[name] and "=" not in arg:
                    i += 1
            i += 1

    def test_autotuned_flags_are_in_its_help(self):
        lines = self.daemon_command_lines()
        # The Job's pods run theirs through `autotune tune --local`.
        self.assertGreaterEqual(len(lines), 3, "the Containerfile, the unit, the Deployment")
        for where, args in lines:
            with self.subTest(where=where):
                positional = [a for i, a in enumerate(args) if not a.startswith("--")
                              and not (i > 0 and self.daemon_help.options.get(args[i - 1], False))]
                self.assertEqual(positional, [],
                                 f"{where}: autotuned takes no positional arguments")
                self.check_flags(where, args, self.daemon_help.options)

    def test_autotune_commands_and_flags_are_in_its_help(self):
        lines = self.cli_command_lines()
        self.assertTrue(lines, "the Job's script runs autotune")
        for where, args in lines:
            with self.subTest(where=where, args=" ".join(args)):
                # Global flags, then the command, then its own flags and
                # arguments (global flags are accepted there too).
                i = 0
                while i < len(args) and args[i].startswith("--"):
                    name = args[i].split("=", 1)[0]
                    self.assertIn(name, self.cli_help.options, f"{where}: global flag {name}")
                    i += 2 if self.cli_help.options[name] and "=" not in args[i] else 1
                self.assertLess(i, len(args), f"{where}: no command")
                command = args[i]
                self.assertIn(command, self.cli_help.subcommands, f"{where}: autotune {command}")
                if command not in self.sub_help:
                    self.sub_help[command] = run_help([self.cli_bin, command])
                options = dict(self.cli_help.options)
                options.update(self.sub_help[command].options)
                self.check_flags(f"{where}: autotune {command}", args[i + 1:], options)

    def test_the_help_parser_reads_known_flags(self):
        # Guards the checks above against a --help layout they misread.
        self.assertTrue(self.daemon_help.options.get("--db"))
        self.assertIs(self.daemon_help.options.get("--insecure"), False)
        self.assertTrue(self.cli_help.options.get("--server"))
        self.assertIs(self.cli_help.options.get("--tls"), False)
        self.assertIn("warmup", self.cli_help.subcommands)


# --- (c) The systemd unit ----------------------------------------------------


class SystemdUnit(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.service = unit_sections(UNIT).get("Service", [])

    def value(self, key):
        return unit_value(self.service, key)

    def test_sandboxing(self):
        self.assertEqual(self.value("NoNewPrivileges"), "yes")
        self.assertEqual(self.value("ProtectSystem"), "strict")
        self.assertEqual(self.value("User"), "autotune")
        # The GPU devices must stay reachable.
        self.assertNotIn(self.value("PrivateDevices"), ("yes", "true", "on", "1"))
        self.assertIsNone(self.value("DeviceAllow"))
        self.assertIn(self.value("DevicePolicy"), (None, "auto"))

    def test_directories_and_reload(self):
        state, runtime = self.value("StateDirectory"), self.value("RuntimeDirectory")
        self.assertTrue(state)
        self.assertTrue(runtime)
        self.assertTrue(self.value("ExecReload"))
        argv = shlex.split(self.value("ExecStart"))
        self.assertEqual(posixpath.basename(argv[0]), "autotuned")
        self.assertTrue(under(flag_value(argv, "--db"), f"/var/lib/{state}"),
                        "the database is in the StateDirectory (ProtectSystem=strict)")
        for address in flag_values(argv, "--listen"):
            if address.startswith("unix://"):
                self.assertTrue(under(address[len("unix://"):], f"/run/{runtime}"),
                                "the socket is in the RuntimeDirectory")

    def test_systemd_analyze_verify(self):
        analyze = shutil.which("systemd-analyze")
        if analyze is None:
            self.skipTest("systemd-analyze is not installed (Debian package systemd)")
        # The installed binary and the service account need not exist here:
        # ExecStart is pointed at an executable that does, so that only what
        # is wrong with the unit file itself is reported.
        daemon = os.environ.get("AUTOTUNED")
        if not (daemon and os.path.isfile(daemon) and os.access(daemon, os.X_OK)):
            daemon = "/bin/true"
        with open(UNIT, encoding="utf-8") as f:
            text = f.read()
        text, count = re.subn(r"^(ExecStart=)(\S+)", lambda m: m.group(1) + os.path.abspath(daemon),
                              text, flags=re.MULTILINE)
        self.assertEqual(count, 1)
        with tempfile.TemporaryDirectory() as tmp:
            unit = os.path.join(tmp, os.path.basename(UNIT))
            with open(unit, "w", encoding="utf-8") as f:
                f.write(text)
            env = dict(os.environ, SYSTEMD_LOG_LEVEL="warning")
            result = subprocess.run([analyze, "verify", "--man=no", unit], capture_output=True,
                                    text=True, env=env, timeout=120)
            said = (result.stdout + result.stderr).strip()
            print(f"\nsystemd-analyze verify (exit {result.returncode}): {said or 'nothing'}")
            # systemd-analyze reports a line it ignores (an unknown key, a
            # bad value) as "<file>:<line>: ..." and still exits 0, so the
            # messages are what counts. Others (no systemd running here, no
            # such user) are about this machine, not the unit.
            errors = [line for line in said.split("\n")
                      if line.startswith(unit + ":") or re.search(
                          r"Unknown (key|section)|Failed to parse|Invalid|is not executable|"
                          r"Missing '='|bad unit file setting", line)]
            self.assertEqual(errors, [], "systemd-analyze found errors in the unit file")


# --- (d) The example config file -------------------------------------------


class ExampleConfig(unittest.TestCase):

    def test_autotuned_reads_it_and_every_value_is_in_effect(self):
        daemon, _ = binaries_or_skip()
        result = subprocess.run([daemon, "--config", CONFIG, "--print-config"],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(CONFIG, encoding="utf-8") as f:
            written = [line.strip() for line in f
                       if line.strip() and not line.lstrip().startswith("#")]
        printed = [line.strip() for line in result.stdout.splitlines()]
        for line in written:
            self.assertIn(line, printed, f"{CONFIG}: '{line}' is not what autotuned took")

    def test_it_agrees_with_the_unit(self):
        sections = unit_sections(UNIT)
        args = shlex.split(unit_value(sections["Service"], "ExecStart"))
        with open(CONFIG, encoding="utf-8") as f:
            text = f.read()
        for flag in ("--db", "--listen", "--socket-mode", "--peer-role"):
            field = flag[2:].replace("-", "_")
            self.assertIn(f'{field}: "{flag_value(args, flag)}"', text,
                          f"{CONFIG} and {UNIT} differ on {flag}")


class InstallDeps(unittest.TestCase):
    """deploy/install-deps.sh: the quick start installs only what it builds
    and runs; CI everything the tests need too."""

    def selection(self, *args):
        out = subprocess.run(["bash", os.path.join(DEPLOY, "install-deps.sh"), *args, "--print"],
                             check=True, capture_output=True, text=True).stdout
        return out.split()

    def test_the_quick_start_installs_no_test_tools(self):
        build = self.selection("--build-only")
        for package in ("cmake", "libgrpc++-dev", "libgtest-dev", "python3-grpcio"):
            self.assertIn(package, build)
        for package in ("chromium", "clang-14", "clang-format-14", "jq", "systemd"):
            self.assertNotIn(package, build)
        everything = self.selection()
        self.assertTrue(set(build) < set(everything))
        self.assertIn("chromium", everything)

    def test_a_bad_argument_is_refused_naming_it(self):
        run = subprocess.run(["bash", os.path.join(DEPLOY, "install-deps.sh"), "--fast"],
                             capture_output=True, text=True)
        self.assertEqual(run.returncode, 2)
        self.assertIn("unknown argument '--fast'", run.stderr)


if __name__ == "__main__":
    unittest.main()
