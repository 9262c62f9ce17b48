//! vp2p's plugin hook deployment (host/kubevirt/plugin-hook.yaml): the
//! `Plugin` object, the `MutatingAdmissionPolicy` that injects the sidecar
//! and its binding agree with each other, with what KubeVirt 1.9.0 requires
//! of a plugin socket (its `kubevirt-plugin-socket-path-policy` and
//! `kubevirt-plugin-sidecar-subpath-policy`, virt-launcher's own check), and
//! with what `p2p-host kubevirt plugin-hook` accepts. The CEL expressions (the
//! Plugin's condition, the policy's match conditions and its JSONPatch
//! mutation) are evaluated with cel-interpreter against a VMI and its
//! launcher pod that must match and ones that must not; no API server runs
//! here, so the pods are written as KubeVirt 1.9.0 creates them. The policy's
//! CEL sees the pod as JSON, as the API server's does; the Plugin's condition
//! sees the VMI as KubeVirt's domain-hook CEL does, by Go field names
//! ([`vmi_as_kubevirt_cel_sees_it`]): a model of that evaluator, which
//! kubevirt_hook_client.rs runs on the same VMIs for real (KubeVirt v1.9.0's
//! own pipeline and CEL environment).

use p2p_tests::process::SpawnOwned;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use cel_interpreter::{Context, Program, Value as CelValue};
use cel_parser::ast::{EntryExpr, Expr, IdedExpr, MapEntryExpr, MapExpr};
use cel_parser::reference::Val;
use cel_parser::Parser;
use p2p_host_kube::kubevirt_plugin::api::PLUGIN_SOCKET_DIR;
use p2p_host_kube::kubevirt_plugin::{DEFAULT_SOCKET, PLUGIN_NAME};
use p2p_tests::{binary, fixture_dir, repo_root};
use serde_json::{json, Value};

/// The YAML documents of host/kubevirt/plugin-hook.yaml by kind.
fn manifests() -> std::collections::BTreeMap<String, serde_yaml::Value> {
    let text = std::fs::read_to_string(repo_root().join("host/kubevirt/plugin-hook.yaml")).unwrap();
    text.split("\n---\n")
        .map(|d| {
            let v: serde_yaml::Value = serde_yaml::from_str(d).unwrap();
            (v["kind"].as_str().unwrap().to_string(), v)
        })
        .collect()
}

/// Evaluates the boolean CEL expression `expr` (cel-interpreter) with `name`
/// bound to `object`, as the API server binds `object` for an admission
/// policy and KubeVirt binds `vmi` for a Plugin's condition.
fn cel_bool(expr: &str, name: &str, object: &Value) -> bool {
    let program = Program::compile(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
    let mut ctx = Context::default();
    ctx.add_variable(name, object.clone()).unwrap();
    match program.execute(&ctx) {
        Ok(CelValue::Bool(b)) => b,
        other => panic!("{expr} on {object}: {other:?}"),
    }
}

/// The VMI with `metadata` as KubeVirt 1.9.0's domain-hook CEL sees it
/// (pkg/virt-launcher/virtwrap/plugins/cel/evaluator.go: `ext.NativeTypes` on
/// v1.VirtualMachineInstance, without json tags): Go field names, the
/// embedded ObjectMeta's fields promoted (`vmi.Annotations`, as KubeVirt's
/// own tests write `vmi.Labels`), and every field present, a nil map reading
/// as empty. Only the ObjectMeta fields a condition here reads.
fn vmi_as_kubevirt_cel_sees_it(metadata: &Value) -> Value {
    let field = |json: &str, empty: Value| {
        metadata
            .get(json)
            .filter(|v| !v.is_null())
            .cloned()
            .unwrap_or(empty)
    };
    json!({
        "Name": field("name", json!("")),
        "Namespace": field("namespace", json!("")),
        "Labels": field("labels", json!({})),
        "Annotations": field("annotations", json!({})),
    })
}

/// Rewrites CEL object construction (`JSONPatch{op: ...}`,
/// `Object.spec.containers{name: ...}`, Kubernetes' typed objects, which
/// cel-interpreter parses but does not evaluate) into maps of the same
/// fields, so the expression evaluates to the JSON the API server would build.
fn objects_as_maps(e: &mut IdedExpr) {
    match &mut e.expr {
        Expr::Struct(s) => {
            let entries = std::mem::take(&mut s.entries);
            let mut map = MapExpr::default();
            for mut entry in entries {
                let EntryExpr::StructField(f) = entry.expr else {
                    panic!("a field of {}", s.type_name)
                };
                let mut value = f.value;
                objects_as_maps(&mut value);
                entry.expr = EntryExpr::MapEntry(MapEntryExpr {
                    key: IdedExpr {
                        id: entry.id,
                        expr: Expr::Literal(Val::String(f.field)),
                    },
                    value,
                    optional: f.optional,
                });
                map.entries.push(entry);
            }
            e.expr = Expr::Map(map);
        }
        Expr::List(l) => l.elements.iter_mut().for_each(objects_as_maps),
        Expr::Map(m) => {
            for entry in &mut m.entries {
                if let EntryExpr::MapEntry(me) = &mut entry.expr {
                    objects_as_maps(&mut me.value);
                }
            }
        }
        _ => {}
    }
}

/// The policy's JSONPatch expression evaluated on `pod`: the patch operations.
fn cel_patch(expr: &str, pod: &Value) -> Vec<Value> {
    let mut parsed = Parser::default()
        .parse(expr)
        .unwrap_or_else(|e| panic!("the policy's CEL does not parse: {e}"));
    objects_as_maps(&mut parsed);
    let mut ctx = Context::default();
    ctx.add_variable("object", pod.clone()).unwrap();
    let out = CelValue::resolve(&parsed, &ctx).unwrap_or_else(|e| panic!("{expr}: {e:?}"));
    out.json()
        .unwrap()
        .as_array()
        .expect("a list of JSONPatch operations")
        .clone()
}

/// A virt-launcher pod as KubeVirt creates it for a VMI with `annotations`
/// (it copies the VMI's annotations to its pod): the `kubevirt.io:
/// virt-launcher` label and, with the Plugins gate, the plugin socket volume.
fn launcher_pod(annotations: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "virt-launcher-gpu-vm-x7k2p",
            "labels": {"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": "gpu-vm"},
            "annotations": annotations,
        },
        "spec": {
            "containers": [{"name": "compute", "image": "quay.io/kubevirt/virt-launcher:v1.9.0"}],
            "volumes": [
                {"name": "private", "emptyDir": {}},
                {"name": "kubevirt-plugin-sockets", "emptyDir": {}},
            ],
        },
    })
}

#[test]
fn the_plugin_and_the_admission_policy_agree_with_the_hook() {
    let m = manifests();
    let plugin = &m["Plugin"];
    assert_eq!(plugin["apiVersion"], "plugin.kubevirt.io/v1alpha1");
    assert_eq!(plugin["metadata"]["name"], PLUGIN_NAME);
    let socket = plugin["spec"]["domainHooks"][0]["sidecar"]["socketPath"]
        .as_str()
        .unwrap();
    assert_eq!(socket, DEFAULT_SOCKET);
    // KubeVirt's kubevirt-plugin-socket-path-policy, and virt-launcher's own check.
    assert!(socket.starts_with(&format!("{PLUGIN_SOCKET_DIR}/{PLUGIN_NAME}/")));
    assert!(socket.ends_with(".sock") && socket.len() <= 108);
    assert_eq!(plugin["spec"]["failureStrategy"], "Fail");
    let map = &m["MutatingAdmissionPolicy"];
    assert_eq!(map["apiVersion"], "admissionregistration.k8s.io/v1");
    let map_name = map["metadata"]["name"].as_str().unwrap();
    assert_eq!(
        plugin["spec"]["mutatingAdmissionPolicies"][0]["name"],
        map_name
    );
    let binding = &m["MutatingAdmissionPolicyBinding"];
    assert_eq!(binding["spec"]["policyName"], map_name);
    // The Plugin's condition, evaluated on VMIs as KubeVirt's CEL sees them:
    // one that asks for vp2p with any vp2p.io/ annotation is selected, others
    // are not. It reads Go field names only: JSON names (vmi.metadata...) do
    // not compile there, and virt-api refuses such a Plugin.
    let condition = plugin["spec"]["condition"].as_str().unwrap();
    assert!(!condition.contains("metadata"), "{condition}");
    let asks = json!({"vp2p.io/on-error": "fail", "kubevirt.io/latest-observed-api-version": "v1"});
    let vmis = [
        (json!({"name": "gpu-vm", "annotations": asks}), true),
        (
            json!({"name": "gpu-vm", "annotations": {"vp2p.io/max-level": "phb"}}),
            true,
        ),
        (json!({"name": "plain"}), false),
        (json!({"name": "plain", "annotations": {}}), false),
        (
            json!({"name": "other", "annotations": {"kubevirt.io/latest-observed-api-version": "v1"}}),
            false,
        ),
        (
            json!({"name": "prefix-only", "annotations": {"example.com/vp2p.io/on-error": "fail"}}),
            false,
        ),
        (
            json!({"name": "no-slash", "annotations": {"vp2p.io": "yes"}}),
            false,
        ),
    ];
    for (metadata, selected) in &vmis {
        let seen = vmi_as_kubevirt_cel_sees_it(metadata);
        assert_eq!(cel_bool(condition, "vmi", &seen), *selected, "{metadata}");
    }

    // The policy's match conditions, all evaluated on pods: the launcher pod
    // of such a VMI matches every one; each pod below fails at least one.
    let conditions: Vec<&str> = map["spec"]["matchConditions"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|c| c["expression"].as_str().unwrap())
        .collect();
    assert_eq!(conditions.len(), 3);
    let matches = |pod: &Value| conditions.iter().all(|c| cel_bool(c, "object", pod));
    let pod = launcher_pod(asks.clone());
    assert!(matches(&pod), "{pod}");
    let mut not_launcher = pod.clone();
    not_launcher["metadata"]["labels"]["kubevirt.io"] = json!("virt-handler");
    // KubeVirt's hotplug attachment pods carry kubevirt.io: hotplug-disk.
    let mut hotplug = pod.clone();
    hotplug["metadata"]["labels"]["kubevirt.io"] = json!("hotplug-disk");
    let mut unlabelled = pod.clone();
    unlabelled["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("labels");
    let mut no_volume = pod.clone();
    no_volume["spec"]["volumes"].as_array_mut().unwrap().pop();
    let mut no_annotations = pod.clone();
    no_annotations["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    for (why, p) in [
        ("virt-handler's label", not_launcher),
        ("a hotplug pod", hotplug),
        ("no labels", unlabelled),
        ("no plugin socket volume", no_volume),
        ("no annotations", no_annotations),
        (
            "no vp2p.io/ annotation",
            launcher_pod(json!({"kubevirt.io/domain": "gpu-vm"})),
        ),
    ] {
        assert!(!matches(&p), "{why}: {p}");
    }
    // The same VMIs as the Plugin's: the launcher pod of each (KubeVirt copies
    // the VMI's annotations to it) gets the sidecar exactly when the Plugin
    // calls it.
    for (metadata, selected) in &vmis {
        let mut p = launcher_pod(metadata.get("annotations").cloned().unwrap_or(json!({})));
        if metadata.get("annotations").is_none() {
            p["metadata"].as_object_mut().unwrap().remove("annotations");
        }
        assert_eq!(matches(&p), *selected, "{metadata}");
    }

    // The mutation, evaluated on the matching pod and applied as the API
    // server applies a JSON Patch "add" at /spec/containers/-: the sidecar is
    // appended, mounting the pod's plugin volume where the Plugin's socket
    // is, with subPath the plugin's name.
    let cel = map["spec"]["mutations"][0]["jsonPatch"]["expression"]
        .as_str()
        .unwrap();
    let ops = cel_patch(cel, &pod);
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert_eq!(ops[0]["op"], "add");
    assert_eq!(ops[0]["path"], "/spec/containers/-");
    let mut patched = pod.clone();
    patched["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(ops[0]["value"].clone());
    let containers = patched["spec"]["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 2);
    let sidecar = &containers[1];
    assert_eq!(sidecar["name"], "vp2p-plugin-hook");
    let mounts = sidecar["volumeMounts"].as_array().unwrap();
    assert_eq!(mounts.len(), 1);
    let volume = mounts[0]["name"].as_str().unwrap();
    assert!(
        patched["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == volume),
        "the sidecar mounts {volume}, which the pod must have"
    );
    assert_eq!(volume, "kubevirt-plugin-sockets");
    let mount_path = mounts[0]["mountPath"].as_str().unwrap();
    assert_eq!(mount_path, format!("{PLUGIN_SOCKET_DIR}/{PLUGIN_NAME}/"));
    assert_eq!(mounts[0]["subPath"], PLUGIN_NAME);
    assert_eq!(sidecar["command"], json!(["p2p-host"]));
    let args: Vec<String> = sidecar["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        args,
        ["kubevirt", "plugin-hook", "--socket", DEFAULT_SOCKET]
    );
    // The socket it serves is inside the mounted directory, where the Plugin looks.
    assert!(socket.starts_with(mount_path) && args[3] == socket);
    assert_eq!(sidecar["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        sidecar["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert_eq!(
        sidecar["securityContext"]["capabilities"]["drop"],
        json!(["ALL"])
    );
    // The image's user is numeric (runAsNonRoot) and p2p-host is on its PATH.
    let cf = std::fs::read_to_string(repo_root().join("host/kubevirt/Containerfile")).unwrap();
    assert!(cf.contains("\nUSER 107\n") && cf.contains("RUN dpkg -i /tmp/p2p-host_*_amd64.deb"));

    // The arguments start the hook (the socket moved into a temporary
    // directory): it serves there and stops on SIGTERM, removing the socket.
    let tmp = tempfile::tempdir().unwrap();
    let sock = tmp.path().join(PLUGIN_NAME).join("hook.sock");
    let mut child = Command::new(binary("p2p-host"))
        .args(&args[..3])
        .arg(&sock)
        .env(
            "VP2P_SYSFS_ROOT",
            fixture_dir("qemu-11.1-two-socket-iommu-on"),
        )
        .stderr(Stdio::piped())
        .spawn_owned()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(
        line.trim_end(),
        format!(
            "p2p-host kubevirt plugin-hook: serving DomainHookService.MutateDomain on {}",
            sock.display()
        )
    );
    assert!(sock.exists());
    // The reader of its standard error is gone (dropped above): the hook
    // still stops cleanly, as a server must whose log reader went away.
    // SAFETY: kill(2) on the pid of a child we have not waited for yet.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(!sock.exists());
}
