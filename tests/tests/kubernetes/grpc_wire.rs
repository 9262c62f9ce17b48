//! vp2p's .proto files (host/kube/proto) against the published APIs: the file
//! descriptor set protox built for p2p-host (`p2p_host_kube::grpc::FILE_DESCRIPTOR_SET`)
//! compared with the table transcribed by hand from the upstream API files
//! (tests/src/grpc_wire/table.rs, which cites them): packages, every method's
//! full path, request and response types and streaming, every enum's
//! values, every message's
//! fields (number, name, type, wire type, repeated) and reserved numbers. A
//! field number, name, type or method path that differs from the published
//! API fails here, whatever the generated code agrees with itself on.

use std::collections::BTreeSet;

use p2p_tests::grpc_wire::table::{
    Api, Field, Type, KUBELET_DRA_HEALTH_V1, KUBELET_DRA_V1, KUBELET_DRA_V1BETA1,
    KUBELET_PLUGINREGISTRATION_V1, KUBELET_V1BETA1, KUBEVIRT_HOOKS_V1ALPHA1,
};
use prost::Message as _;
use prost_types::field_descriptor_proto::{Label, Type as Pt};
use prost_types::{DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet};

fn descriptors() -> FileDescriptorSet {
    FileDescriptorSet::decode(p2p_host_kube::grpc::FILE_DESCRIPTOR_SET)
        .expect("a FileDescriptorSet")
}

fn file<'a>(set: &'a FileDescriptorSet, api: &Api) -> &'a FileDescriptorProto {
    let files: Vec<_> = set
        .file
        .iter()
        .filter(|f| f.package() == api.package)
        .collect();
    assert_eq!(files.len(), 1, "one .proto of package {}", api.package);
    assert_eq!(files[0].syntax(), "proto3", "{}", files[0].name());
    files[0]
}

/// A field as the table says it, in the descriptor's terms:
/// (number, name, type, label, type name, proto3 optional).
type Row = (i32, String, Pt, Label, String, bool);

fn want_row(api: &Api, message: &str, f: &Field) -> Row {
    let label = if f.repeated {
        Label::Repeated
    } else {
        Label::Optional
    };
    let (ty, type_name) = match f.ty {
        Type::String => (Pt::String, String::new()),
        Type::Bytes => (Pt::Bytes, String::new()),
        Type::Bool => (Pt::Bool, String::new()),
        Type::Int32 => (Pt::Int32, String::new()),
        Type::Int64 => (Pt::Int64, String::new()),
        Type::Message(m) => (Pt::Message, format!(".{}.{m}", api.package)),
        Type::Enum(e) => (Pt::Enum, format!(".{}.{e}", api.package)),
        // A map is a repeated nested entry message named after the field
        // (protobuf.dev, proto3 language guide, "Maps", backwards compatibility).
        Type::MapStringString | Type::MapStringMessage(_) => {
            let mut entry: String = String::new();
            let mut up = true;
            for c in f.name.chars() {
                if c == '_' {
                    up = true;
                } else if up {
                    entry.push(c.to_ascii_uppercase());
                    up = false;
                } else {
                    entry.push(c);
                }
            }
            (
                Pt::Message,
                format!(".{}.{message}.{entry}Entry", api.package),
            )
        }
    };
    (
        f.number as i32,
        f.name.to_string(),
        ty,
        label,
        type_name,
        f.optional,
    )
}

fn got_row(f: &FieldDescriptorProto) -> Row {
    (
        f.number(),
        f.name().to_string(),
        f.r#type(),
        f.label(),
        f.type_name().to_string(),
        f.proto3_optional(),
    )
}

/// The wire type protobuf encodes a descriptor type with (0 VARINT, 2 LEN).
fn wire_type(t: Pt) -> u8 {
    match t {
        Pt::Bool | Pt::Int32 | Pt::Int64 | Pt::Enum => 0,
        Pt::String | Pt::Bytes | Pt::Message => 2,
        other => panic!("a type these APIs do not use: {other:?}"),
    }
}

fn check_map_entry(api: &Api, m: &DescriptorProto, type_name: &str, value: Type) {
    let name = type_name.rsplit('.').next().unwrap();
    let entry = m
        .nested_type
        .iter()
        .find(|n| n.name() == name)
        .unwrap_or_else(|| panic!("{}: no nested {name}", m.name()));
    assert!(
        entry.options.as_ref().is_some_and(|o| o.map_entry()),
        "{name} is a map entry"
    );
    let kv: Vec<(i32, &str, Pt, &str)> = entry
        .field
        .iter()
        .map(|f| (f.number(), f.name(), f.r#type(), f.type_name()))
        .collect();
    let value = match value {
        Type::MapStringMessage(v) => (2, "value", Pt::Message, format!(".{}.{v}", api.package)),
        _ => (2, "value", Pt::String, String::new()),
    };
    assert_eq!(
        kv,
        [
            (1, "key", Pt::String, ""),
            (value.0, value.1, value.2, value.3.as_str())
        ],
        "{name}"
    );
}

fn check_api(api: &Api) {
    let set = descriptors();
    let file = file(&set, api);

    // Services: every method's path, types and streaming.
    let got: BTreeSet<(String, String, String, bool, bool)> = file
        .service
        .iter()
        .flat_map(|s| {
            s.method.iter().map(move |m| {
                (
                    format!("/{}.{}/{}", api.package, s.name(), m.name()),
                    m.input_type().to_string(),
                    m.output_type().to_string(),
                    m.client_streaming(),
                    m.server_streaming(),
                )
            })
        })
        .collect();
    let want: BTreeSet<(String, String, String, bool, bool)> = api
        .services
        .iter()
        .flat_map(|(service, methods)| {
            methods.iter().map(move |m| {
                assert!(m.path.starts_with(&format!("/{}.{service}/", api.package)));
                (
                    m.path.to_string(),
                    format!(".{}.{}", api.package, m.input),
                    format!(".{}.{}", api.package, m.output),
                    false,
                    m.server_streaming,
                )
            })
        })
        .collect();
    assert_eq!(got, want, "{}: methods", api.package);

    // Enums: the same names, each with the same values.
    let got: Vec<(String, Vec<(String, i32)>)> = file
        .enum_type
        .iter()
        .map(|e| {
            let values = e
                .value
                .iter()
                .map(|v| (v.name().to_string(), v.number()))
                .collect();
            (e.name().to_string(), values)
        })
        .collect();
    let want: Vec<(String, Vec<(String, i32)>)> = api
        .enums
        .iter()
        .map(|(name, values)| {
            let values = values.iter().map(|(n, v)| (n.to_string(), *v)).collect();
            (name.to_string(), values)
        })
        .collect();
    assert_eq!(got, want, "{}: enums", api.package);

    // Messages: the same set, then each one's fields and reserved numbers.
    let got_names: BTreeSet<&str> = file.message_type.iter().map(|m| m.name()).collect();
    let want_names: BTreeSet<&str> = api.messages.iter().map(|m| m.name).collect();
    assert_eq!(got_names, want_names, "{}: messages", api.package);
    for m in &file.message_type {
        let t = api.message(m.name());
        let mut got: Vec<Row> = m.field.iter().map(got_row).collect();
        let mut want: Vec<Row> = t.fields.iter().map(|f| want_row(api, t.name, f)).collect();
        got.sort();
        want.sort();
        assert_eq!(got, want, "{}.{}: fields", api.package, t.name);
        for (f, row) in t
            .fields
            .iter()
            .zip(t.fields.iter().map(|f| want_row(api, t.name, f)))
        {
            assert_eq!(wire_type(row.2), f.ty.wire_type(), "{}.{}", t.name, f.name);
            if matches!(f.ty, Type::MapStringString | Type::MapStringMessage(_)) {
                check_map_entry(api, m, &row.4, f.ty);
            }
        }
        let entries = t
            .fields
            .iter()
            .filter(|f| matches!(f.ty, Type::MapStringString | Type::MapStringMessage(_)))
            .count();
        assert_eq!(m.nested_type.len(), entries, "{}: nested messages", t.name);
        let reserved: Vec<u32> = m
            .reserved_range
            .iter()
            .flat_map(|r| r.start() as u32..r.end() as u32)
            .collect();
        assert_eq!(reserved, t.reserved, "{}: reserved numbers", t.name);
    }
}

#[test]
fn kubelet_device_plugin_v1beta1_is_the_published_api() {
    check_api(&KUBELET_V1BETA1);
}

#[test]
fn kubevirt_domain_hook_v1alpha1_is_the_published_api() {
    check_api(&KUBEVIRT_HOOKS_V1ALPHA1);
}

#[test]
fn kubelet_plugin_registration_v1_is_the_published_api() {
    check_api(&KUBELET_PLUGINREGISTRATION_V1);
}

#[test]
fn kubelet_dra_v1_is_the_published_api() {
    check_api(&KUBELET_DRA_V1);
}

#[test]
fn kubelet_dra_v1beta1_is_the_published_api() {
    check_api(&KUBELET_DRA_V1BETA1);
}

#[test]
fn kubelet_dra_health_v1_is_the_published_api() {
    check_api(&KUBELET_DRA_HEALTH_V1);
}

#[test]
fn every_proto_file_is_one_of_the_tables() {
    // A .proto added to host/kube/proto (a new API) needs its table here too.
    let set = descriptors();
    let packages: Vec<&str> = set.file.iter().map(|f| f.package()).collect();
    assert_eq!(
        packages.iter().copied().collect::<BTreeSet<_>>(),
        BTreeSet::from([
            KUBELET_V1BETA1.package,
            KUBEVIRT_HOOKS_V1ALPHA1.package,
            KUBELET_PLUGINREGISTRATION_V1.package,
            KUBELET_DRA_V1.package,
            KUBELET_DRA_V1BETA1.package,
            KUBELET_DRA_HEALTH_V1.package,
        ]),
        "{packages:?}"
    );
}
