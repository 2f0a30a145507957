//! The MCS reconcile core end to end, through its public API only: snapshots of member
//! clusters in, desired ServiceImports, MCS EndpointSlices and export conditions out.

#![allow(clippy::unwrap_used)]

mod support;

use serde_json::json;
use sluice_api::mcs::{
    LABEL_MANAGED_BY, LABEL_SERVICE_NAME, LABEL_SOURCE_CLUSTER, MANAGED_BY, ServiceImportType,
};
use sluice_mcs::{
    ANNOTATION_DRAINING, ANNOTATION_EXPORT, ANNOTATION_WEIGHT, CONDITION_CONFLICT, CONDITION_READY,
    CONDITION_VALID, ClusterError, MAX_ENDPOINTS_PER_SLICE, ServiceKey, VipAllocator, VipError,
};
use support::*;

fn is_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

/// east exports `echo` (http 80 → 8080) with one endpoint; west only has the namespace.
fn east_exports_echo() -> Vec<sluice_mcs::MemberSnapshot> {
    let mut east = member("east", 0);
    serve(
        &mut east,
        service("echo", T0, &[("http", 80, 8080)]),
        "127.20.1.1",
    );
    east.exports.insert(key("echo"), export("echo", T0));
    vec![east, member("west", 1)]
}

#[test]
fn export_then_unexport() {
    let mut members = east_exports_echo();
    let mut vips = VipAllocator::new();
    let d = run(&members, &mut vips, T1);
    assert!(d.errors.is_empty(), "{:?}", d.errors);

    for (cluster, vip) in [("east", "127.60.0.1"), ("west", "127.61.0.1")] {
        let imp = import(&d, cluster, "echo");
        assert_eq!(imp.spec.r#type, ServiceImportType::ClusterSetIP);
        assert_eq!(imp.spec.ips, vec![vip.to_string()], "{cluster}");
        assert_eq!(imp.spec.ip_families, vec!["IPv4".to_string()]);
        assert_eq!(imp.spec.ports.len(), 1);
        assert_eq!(
            imp.spec.ports[0].port, 80,
            "the service port, not the target"
        );
        assert_eq!(imp.spec.ports[0].name.as_deref(), Some("http"));
        let status = imp.status.as_ref().unwrap();
        assert_eq!(status.clusters.len(), 1);
        assert_eq!(status.clusters[0].cluster, "east");
        assert_eq!(status.conditions[0].type_, "Ready");
        assert_eq!(status.conditions[0].status, "True");
        assert_eq!(status.conditions[0].reason, "Ready");
        assert_eq!(
            imp.metadata.labels.as_ref().unwrap()[LABEL_MANAGED_BY],
            MANAGED_BY
        );

        let slices = slices_from(&d, cluster, "echo", "east");
        assert_eq!(slices.len(), 1);
        let s = slices[0];
        assert_eq!(s.metadata.namespace.as_deref(), Some(NS));
        let labels = s.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_SERVICE_NAME], "echo");
        assert_eq!(labels[LABEL_SOURCE_CLUSTER], "east");
        assert_eq!(labels[LABEL_MANAGED_BY], MANAGED_BY);
        assert!(!labels.contains_key("kubernetes.io/service-name"));
        assert_eq!(s.address_type, "IPv4");
        assert_eq!(slice_ports(s), vec![("http".to_string(), 8080)]);
        let ep = &s.endpoints.as_ref().unwrap()[0];
        assert_eq!(ep.addresses, vec!["127.20.1.1".to_string()]);
        assert!(
            ep.target_ref.is_none(),
            "the Pod is not in the importing cluster"
        );
    }
    assert_eq!(
        condition(&d, "east", "echo", CONDITION_VALID).status,
        "True"
    );
    let ready = condition(&d, "east", "echo", CONDITION_READY);
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "Exported")
    );
    let conflict = condition(&d, "east", "echo", CONDITION_CONFLICT);
    assert_eq!(
        (conflict.status.as_str(), conflict.reason.as_str()),
        ("False", "NoConflicts")
    );
    assert_eq!(conflict.observed_generation, Some(1));
    assert!(of(&d, "west").export_statuses.is_empty());

    // Unexport: everything goes, and the caller is told what to delete.
    write_back(&mut members, &d);
    let observed_slices: Vec<_> = of(&d, "west").slices.values().cloned().collect();
    members[0].exports.clear();
    let d2 = run(&members, &mut vips, T2);
    for cluster in ["east", "west"] {
        let c = of(&d2, cluster);
        assert!(c.imports.is_empty());
        assert!(c.slices.is_empty());
        let m = members.iter().find(|m| m.name.as_str() == cluster).unwrap();
        assert_eq!(c.stale_imports(m.imports.values()), vec![key("echo")]);
    }
    assert_eq!(
        of(&d2, "west").stale_slices(&observed_slices).len(),
        observed_slices.len()
    );
    assert_eq!(vips.get(&id("east"), &key("echo")), None, "VIP freed");
    assert!(vips.is_empty());
}

#[test]
fn imports_only_where_the_namespace_exists() {
    let mut members = east_exports_echo();
    members.push(member("north", 2));
    members[1].namespaces.clear();
    members[2]
        .namespaces
        .get_mut(NS)
        .unwrap()
        .metadata
        .deletion_timestamp = Some(time(T0));
    let d = run(&members, &mut VipAllocator::new(), T1);
    assert!(of(&d, "east").imports.contains_key(&key("echo")));
    assert!(of(&d, "west").imports.is_empty());
    assert!(of(&d, "west").slices.is_empty());
    assert!(of(&d, "north").imports.is_empty(), "terminating namespace");
}

#[test]
fn implicit_export_and_opt_out() {
    let mut east = member("east", 0);
    east.namespaces.insert(NS.into(), namespace(NS, true));
    serve(
        &mut east,
        service("echo", T0, &[("http", 80, 8080)]),
        "127.20.1.1",
    );
    let private = annotate(
        service("private", T0, &[("http", 80, 8080)]),
        ANNOTATION_EXPORT,
        "false",
    );
    serve(&mut east, private, "127.20.1.2");
    let forced = annotate(
        service("forced", T0, &[("http", 80, 8080)]),
        ANNOTATION_EXPORT,
        "false",
    );
    serve(&mut east, forced, "127.20.1.3");
    east.exports.insert(key("forced"), export("forced", T1));
    let members = vec![east, member("west", 1)];

    let d = run(&members, &mut VipAllocator::new(), T1);
    let west = of(&d, "west");
    let imported: Vec<&ServiceKey> = west.import_keys().collect();
    assert_eq!(imported, vec![&key("echo"), &key("forced")]);
    assert_eq!(slices_from(&d, "west", "echo", "east").len(), 1);
    // Only explicit exports get a status: there is no object to put it on otherwise.
    let statuses: Vec<&ServiceKey> = of(&d, "east").export_statuses.keys().collect();
    assert_eq!(statuses, vec![&key("forced")]);

    // A Service outside a placed namespace needs a ServiceExport.
    let mut plain = members.clone();
    plain[0].namespaces.insert(NS.into(), namespace(NS, false));
    let d = run(&plain, &mut VipAllocator::new(), T1);
    let imported: Vec<&ServiceKey> = of(&d, "west").import_keys().collect();
    assert_eq!(imported, vec![&key("forced")]);
}

#[test]
fn implicit_export_is_as_old_as_its_service() {
    let mut east = member("east", 0);
    east.namespaces.insert(NS.into(), namespace(NS, true));
    serve(
        &mut east,
        service("echo", T0, &[("http", 80, 8080)]),
        "127.20.1.1",
    );
    let mut west = member("west", 1);
    serve(
        &mut west,
        with_spec(
            service("echo", T1, &[("http", 80, 8080)]),
            json!({"sessionAffinity": "ClientIP"}),
        ),
        "127.21.1.1",
    );
    west.exports.insert(key("echo"), export("echo", T1));
    let d = run(&[east, west], &mut VipAllocator::new(), T2);
    let c = condition(&d, "west", "echo", CONDITION_CONFLICT);
    assert_eq!(c.reason, "SessionAffinityConflict");
    assert!(
        c.message
            .contains("from cluster east (created 2026-01-01T00:00:00Z)"),
        "{}",
        c.message
    );
    assert_eq!(
        import(&d, "west", "echo").spec.session_affinity.as_deref(),
        Some("None")
    );
}

#[test]
fn headless_has_no_vip_and_keeps_hostnames() {
    let mut east = member("east", 0);
    let svc = with_spec(
        service("db", T0, &[("pg", 5432, 5432)]),
        json!({"clusterIP": "None", "ipFamilies": ["IPv6"]}),
    );
    east.services.insert(key("db"), svc);
    east.slices.insert(
        key("db"),
        vec![own_slice(
            "db",
            "IPv6",
            &[("pg", 5432)],
            &[("fd00::1", true), ("fd00::2", false)],
        )],
    );
    east.exports.insert(key("db"), export("db", T0));
    let mut vips = VipAllocator::new();
    let d = run(&[east, member("west", 1)], &mut vips, T1);
    let imp = import(&d, "west", "db");
    assert_eq!(imp.spec.r#type, ServiceImportType::Headless);
    assert!(imp.spec.ips.is_empty());
    assert_eq!(imp.spec.ip_families, vec!["IPv6".to_string()]);
    assert_eq!(vips.len(&id("west")), 0);
    let s = slices_from(&d, "west", "db", "east");
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].address_type, "IPv6");
    let eps = s[0].endpoints.as_ref().unwrap();
    assert_eq!(
        eps.len(),
        2,
        "not-ready endpoints are mirrored with their conditions"
    );
    assert_eq!(eps[0].hostname.as_deref(), Some("pod-fd00--1"));
    assert_eq!(eps[0].node_name.as_deref(), Some("node-1"));
    assert_eq!(eps[0].zone.as_deref(), Some("zone-a"));
    let cond = eps[1].conditions.as_ref().unwrap();
    assert_eq!(
        (cond.ready, cond.serving, cond.terminating),
        (Some(false), Some(false), Some(true))
    );
}

#[test]
fn external_name_is_invalid() {
    let mut east = member("east", 0);
    let svc = with_spec(
        service("ext", T0, &[]),
        json!({"type": "ExternalName", "externalName": "example.com", "clusterIP": null}),
    );
    east.services.insert(key("ext"), svc);
    east.exports.insert(key("ext"), export("ext", T0));
    let d = run(&[east, member("west", 1)], &mut VipAllocator::new(), T1);
    let valid = condition(&d, "east", "ext", CONDITION_VALID);
    assert_eq!(
        (valid.status.as_str(), valid.reason.as_str()),
        ("False", "InvalidServiceType")
    );
    assert!(valid.message.contains("ExternalName"));
    assert_eq!(
        condition(&d, "east", "ext", CONDITION_READY).status,
        "False"
    );
    assert!(of(&d, "west").imports.is_empty());
    assert!(of(&d, "east").slices.is_empty());
}

#[test]
fn export_without_service() {
    let mut east = member("east", 0);
    east.exports.insert(key("ghost"), export("ghost", T0));
    let d = run(&[east, member("west", 1)], &mut VipAllocator::new(), T1);
    let valid = condition(&d, "east", "ghost", CONDITION_VALID);
    assert_eq!(
        (valid.status.as_str(), valid.reason.as_str()),
        ("False", "NoService")
    );
    let ready = condition(&d, "east", "ghost", CONDITION_READY);
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "Pending")
    );
    assert!(
        of(&d, "east").export_statuses[&key("ghost")]
            .conditions
            .iter()
            .all(|c| c.type_ != CONDITION_CONFLICT)
    );
    assert!(of(&d, "west").imports.is_empty());
}

#[test]
fn an_invalid_export_does_not_block_valid_ones() {
    let mut members = east_exports_echo();
    members[1]
        .exports
        .insert(key("echo"), export("echo", "2025-01-01T00:00:00Z"));
    let d = run(&members, &mut VipAllocator::new(), T1);
    assert_eq!(
        condition(&d, "west", "echo", CONDITION_VALID).reason,
        "NoService"
    );
    let imp = import(&d, "west", "echo");
    assert_eq!(imp.status.as_ref().unwrap().clusters.len(), 1);
    assert_eq!(
        condition(&d, "east", "echo", CONDITION_CONFLICT).status,
        "False"
    );
}

/// Every conflict kind: west's export (younger) differs from east's in one property.
#[test]
fn each_conflict_is_reported_on_every_export() {
    type Tweak = fn(&mut sluice_mcs::MemberSnapshot);
    let cases: Vec<(&str, &str, Tweak)> = vec![
        ("TypeConflict", "type", |m| {
            let svc = m.services.get_mut(&key("echo")).unwrap();
            *svc = with_spec(svc.clone(), json!({"clusterIP": "None"}));
        }),
        ("PortConflict", "ports", |m| {
            let svc = m.services.get_mut(&key("echo")).unwrap();
            *svc = with_spec(
                svc.clone(),
                json!({"ports": [{"name": "http", "port": 81, "targetPort": 8080}]}),
            );
        }),
        ("SessionAffinityConflict", "sessionAffinity", |m| {
            let svc = m.services.get_mut(&key("echo")).unwrap();
            *svc = with_spec(svc.clone(), json!({"sessionAffinity": "ClientIP"}));
        }),
        (
            "SessionAffinityConfigConflict",
            "sessionAffinityConfig",
            |m| {
                for (i, m_svc) in m.services.values_mut().enumerate() {
                    *m_svc = with_spec(
                        m_svc.clone(),
                        json!({"sessionAffinity": "ClientIP",
                    "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60 + i}}}),
                    );
                }
            },
        ),
        ("LabelsConflict", "exportedLabels", |m| {
            m.exports.insert(
                key("echo"),
                export_with("echo", T1, json!({"exportedLabels": {"team": "b"}})),
            );
        }),
        ("AnnotationsConflict", "exportedAnnotations", |m| {
            m.exports.insert(
                key("echo"),
                export_with("echo", T1, json!({"exportedAnnotations": {"note": "b"}})),
            );
        }),
        (
            "InternalTrafficPolicyConflict",
            "internalTrafficPolicy",
            |m| {
                let svc = m.services.get_mut(&key("echo")).unwrap();
                *svc = with_spec(svc.clone(), json!({"internalTrafficPolicy": "Local"}));
            },
        ),
        ("TrafficDistributionConflict", "trafficDistribution", |m| {
            let svc = m.services.get_mut(&key("echo")).unwrap();
            *svc = with_spec(svc.clone(), json!({"trafficDistribution": "PreferClose"}));
        }),
        ("IPFamilyConflict", "ipFamilies", |m| {
            let svc = m.services.get_mut(&key("echo")).unwrap();
            *svc = with_spec(svc.clone(), json!({"ipFamilies": ["IPv6"]}));
        }),
    ];
    for (reason, field, tweak) in cases {
        let mut members = east_exports_echo();
        // The SessionAffinityConfig case needs ClientIP on east too, with another timeout.
        if reason == "SessionAffinityConfigConflict" {
            let svc = members[0].services.get_mut(&key("echo")).unwrap();
            *svc = with_spec(
                svc.clone(),
                json!({"sessionAffinity": "ClientIP",
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 30}}}),
            );
        }
        serve(
            &mut members[1],
            service("echo", T1, &[("http", 80, 8080)]),
            "127.21.1.1",
        );
        members[1].exports.insert(key("echo"), export("echo", T1));
        tweak(&mut members[1]);

        let d = run(&members, &mut VipAllocator::new(), T2);
        for cluster in ["east", "west"] {
            let c = condition(&d, cluster, "echo", CONDITION_CONFLICT);
            assert_eq!(c.status, "True", "{reason} on {cluster}");
            assert_eq!(c.reason, reason, "on {cluster}");
            assert!(c.message.contains(field), "{reason}: {}", c.message);
            assert!(
                c.message.contains("cluster west"),
                "{reason}: {}",
                c.message
            );
            assert!(
                c.message.ends_with(
                    "resolved by the oldest export, from cluster east (created 2026-01-01T00:00:00Z)"
                ),
                "{reason}: {}",
                c.message
            );
            // A conflict does not stop the younger export from contributing endpoints.
            assert_eq!(
                condition(&d, cluster, "echo", CONDITION_READY).status,
                "True"
            );
        }
        // The winner's values are on the import.
        let imp = import(&d, "west", "echo");
        assert_eq!(imp.spec.r#type, ServiceImportType::ClusterSetIP, "{reason}");
        assert_eq!(imp.spec.ports[0].port, 80, "{reason}");
        assert!(imp.metadata.annotations.is_none(), "{reason}");
        assert_eq!(imp.metadata.labels.as_ref().unwrap().len(), 1, "{reason}");
        assert_eq!(imp.spec.internal_traffic_policy.as_deref(), Some("Cluster"));
        assert_eq!(imp.spec.traffic_distribution, None);
        assert_eq!(imp.status.as_ref().unwrap().clusters.len(), 2);
    }
}

#[test]
fn identical_exports_do_not_conflict_and_labels_reach_the_import() {
    let mut members = east_exports_echo();
    let spec = json!({"exportedLabels": {"team": "a"}, "exportedAnnotations": {"note": "x"}});
    members[0]
        .exports
        .insert(key("echo"), export_with("echo", T0, spec.clone()));
    serve(
        &mut members[1],
        service("echo", T1, &[("http", 80, 8080)]),
        "127.21.1.1",
    );
    members[1]
        .exports
        .insert(key("echo"), export_with("echo", T1, spec));
    let d = run(&members, &mut VipAllocator::new(), T2);
    for cluster in ["east", "west"] {
        assert_eq!(
            condition(&d, cluster, "echo", CONDITION_CONFLICT).reason,
            "NoConflicts"
        );
    }
    let imp = import(&d, "east", "echo");
    assert_eq!(imp.metadata.labels.as_ref().unwrap()["team"], "a");
    assert_eq!(imp.metadata.annotations.as_ref().unwrap()["note"], "x");
    let clusters: Vec<&str> = imp
        .status
        .as_ref()
        .unwrap()
        .clusters
        .iter()
        .map(|c| c.cluster.as_str())
        .collect();
    assert_eq!(clusters, vec!["east", "west"]);
}

#[test]
fn ties_in_age_go_to_the_smaller_cluster_id() {
    let mut members = east_exports_echo();
    serve(
        &mut members[1],
        with_spec(
            service("echo", T0, &[("http", 80, 8080)]),
            json!({"sessionAffinity": "ClientIP"}),
        ),
        "127.21.1.1",
    );
    members[1].exports.insert(key("echo"), export("echo", T0));
    let d = run(&members, &mut VipAllocator::new(), T2);
    let c = condition(&d, "west", "echo", CONDITION_CONFLICT);
    assert!(c.message.contains("from cluster east"), "{}", c.message);
    assert_eq!(
        import(&d, "west", "echo").spec.session_affinity.as_deref(),
        Some("None")
    );
}

#[test]
fn ports_union_with_per_cluster_slice_ports() {
    let mut members = east_exports_echo();
    serve(
        &mut members[1],
        service(
            "echo",
            T1,
            &[
                ("http", 80, 8081),
                ("grpc", 9000, 9090),
                ("admin", 80, 7000),
                ("", 443, 8443),
            ],
        ),
        "127.21.1.1",
    );
    members[1].exports.insert(key("echo"), export("echo", T1));
    let d = run(&members, &mut VipAllocator::new(), T2);

    let ports: Vec<(Option<&str>, i32)> = import(&d, "east", "echo")
        .spec
        .ports
        .iter()
        .map(|p| (p.name.as_deref(), p.port))
        .collect();
    assert_eq!(
        ports,
        vec![(Some("http"), 80), (Some("grpc"), 9000), (None, 443)]
    );

    let east = slices_from(&d, "west", "echo", "east");
    assert_eq!(slice_ports(east[0]), vec![("http".to_string(), 8080)]);
    let west = slices_from(&d, "east", "echo", "west");
    assert_eq!(
        slice_ports(west[0]),
        vec![
            ("http".to_string(), 8081),
            ("grpc".to_string(), 9090),
            (String::new(), 8443)
        ],
        "each source lists only its own ports, with its own target ports; admin clashed"
    );

    for cluster in ["east", "west"] {
        let c = condition(&d, cluster, "echo", CONDITION_CONFLICT);
        assert_eq!(c.reason, "PortConflict");
        assert!(
            c.message.contains("port \"admin\" 80/TCP of cluster west"),
            "{}",
            c.message
        );
    }

    // Two unnamed ports clash by name (the empty name counts).
    let mut members = east_exports_echo();
    members[0]
        .services
        .insert(key("echo"), service("echo", T0, &[("", 80, 8080)]));
    serve(
        &mut members[1],
        service("echo", T1, &[("", 81, 8081)]),
        "127.21.1.1",
    );
    members[1].exports.insert(key("echo"), export("echo", T1));
    let d = run(&members, &mut VipAllocator::new(), T2);
    let ports: Vec<i32> = import(&d, "east", "echo")
        .spec
        .ports
        .iter()
        .map(|p| p.port)
        .collect();
    assert_eq!(ports, vec![80]);
    assert!(slice_ports(slices_from(&d, "east", "echo", "west")[0]).is_empty());
    assert_eq!(
        condition(&d, "east", "echo", CONDITION_CONFLICT).reason,
        "PortConflict"
    );
}

#[test]
fn vips_are_stable_across_reconciles_and_restarts() {
    let mut members = east_exports_echo();
    serve(
        &mut members[0],
        service("api", T0, &[("http", 80, 8080)]),
        "127.20.1.2",
    );
    members[0].exports.insert(key("api"), export("api", T0));
    let mut vips = VipAllocator::new();
    let d1 = run(&members, &mut vips, T1);
    let vip = |d: &sluice_mcs::Desired, c: &str, s: &str| import(d, c, s).spec.ips.clone();
    assert_ne!(vip(&d1, "west", "api"), vip(&d1, "west", "echo"));

    let d2 = run(&members, &mut vips, T2);
    assert_eq!(
        snapshot(&d1)["west"]["imports"][0]["spec"],
        snapshot(&d2)["west"]["imports"][0]["spec"]
    );
    for c in ["east", "west"] {
        for s in ["api", "echo"] {
            assert_eq!(vip(&d1, c, s), vip(&d2, c, s));
        }
    }

    // A restarted controller learns the VIPs back from the imports it observes. The new
    // service `new` sorts first, but must not take a VIP an observed import holds.
    write_back(&mut members, &d1);
    for m in &mut members {
        for imp in m.imports.values_mut() {
            let ip = imp.spec.ips[0].replace(".0.", ".7.");
            imp.spec.ips = vec![ip];
        }
    }
    let moved = members[1].imports[&key("api")].spec.ips.clone();
    members[1].imports.get_mut(&key("echo")).unwrap().spec.ips = vec!["127.61.0.1".into()];
    serve(
        &mut members[0],
        service("aaa-new", T1, &[("http", 80, 8080)]),
        "127.20.1.3",
    );
    members[0]
        .exports
        .insert(key("aaa-new"), export("aaa-new", T1));
    let mut fresh = VipAllocator::new();
    let d3 = run(&members, &mut fresh, T2);
    assert_eq!(vip(&d3, "west", "api"), moved);
    assert_eq!(vip(&d3, "west", "echo"), vec!["127.61.0.1".to_string()]);
    let new = vip(&d3, "west", "aaa-new");
    assert!(!new.is_empty() && new != moved && new != vec!["127.61.0.1".to_string()]);

    // An observed VIP outside the cluster's range is replaced.
    members[1].imports.get_mut(&key("echo")).unwrap().spec.ips = vec!["10.1.2.3".into()];
    let d4 = run(&members, &mut VipAllocator::new(), T2);
    assert!(vip(&d4, "west", "echo")[0].starts_with("127.61."));
}

#[test]
fn the_import_lives_until_the_last_export_goes() {
    let mut members = east_exports_echo();
    serve(
        &mut members[1],
        service("echo", T1, &[("http", 80, 8080)]),
        "127.21.1.1",
    );
    members[1].exports.insert(key("echo"), export("echo", T1));
    let mut vips = VipAllocator::new();
    let d = run(&members, &mut vips, T1);
    let vip = import(&d, "west", "echo").spec.ips.clone();

    members[0].exports.clear();
    let d = run(&members, &mut vips, T2);
    let imp = import(&d, "west", "echo");
    assert_eq!(imp.spec.ips, vip, "the VIP outlives the oldest export");
    let clusters: Vec<&str> = imp
        .status
        .as_ref()
        .unwrap()
        .clusters
        .iter()
        .map(|c| c.cluster.as_str())
        .collect();
    assert_eq!(clusters, vec!["west"]);
    assert!(slices_from(&d, "west", "echo", "east").is_empty());
    assert_eq!(slices_from(&d, "east", "echo", "west").len(), 1);

    members[1].exports.clear();
    let d = run(&members, &mut vips, T2);
    assert!(of(&d, "west").imports.is_empty());
    assert!(of(&d, "east").imports.is_empty());
    assert!(vips.is_empty());
}

#[test]
fn a_dead_cluster_neither_exports_nor_imports() {
    let mut members = east_exports_echo();
    serve(
        &mut members[1],
        service("echo", T1, &[("http", 80, 8080)]),
        "127.21.1.1",
    );
    members[1].exports.insert(key("echo"), export("echo", T1));
    members.push(member("north", 2));
    let mut vips = VipAllocator::new();
    run(&members, &mut vips, T1);

    members[1].alive = false;
    let d = run(&members, &mut vips, T2);
    assert!(
        d.cluster(&name("west")).is_none(),
        "nothing is written to a dead cluster"
    );
    for cluster in ["east", "north"] {
        assert!(slices_from(&d, cluster, "echo", "west").is_empty());
        assert_eq!(slices_from(&d, cluster, "echo", "east").len(), 1);
        let imp = import(&d, cluster, "echo");
        assert_eq!(imp.status.as_ref().unwrap().clusters.len(), 1);
    }
    assert!(
        vips.get(&id("west"), &key("echo")).is_some(),
        "kept for its return"
    );

    members[0].alive = false;
    let d = run(&members, &mut vips, T2);
    assert!(of(&d, "north").imports.is_empty(), "no alive exporter left");

    members.remove(1);
    run(&members, &mut vips, T2);
    assert_eq!(
        vips.len(&id("west")),
        0,
        "a member that left frees its VIPs"
    );
}

#[test]
fn a_duplicate_cluster_id_is_left_out() {
    let base = east_exports_echo();
    let mut vips = VipAllocator::new();
    let expected = snapshot(&run(&base, &mut vips, T1));

    // "east-2" claims id "east" and exports a conflicting, older echo; it comes first in
    // the list, but later by name.
    let mut dup = sluice_mcs::MemberSnapshot::new(name("east-2"), id("east"), 5);
    dup.namespaces.insert(NS.into(), namespace(NS, false));
    serve(
        &mut dup,
        with_spec(
            service("echo", "2020-01-01T00:00:00Z", &[("http", 80, 8080)]),
            json!({"clusterIP": "None"}),
        ),
        "127.25.1.1",
    );
    dup.exports
        .insert(key("echo"), export("echo", "2020-01-01T00:00:00Z"));
    let mut members = vec![dup];
    members.extend(base);
    let d = run(&members, &mut vips, T1);
    assert_eq!(
        d.errors,
        vec![ClusterError::DuplicateClusterId {
            id: id("east"),
            kept: name("east"),
            excluded: name("east-2"),
        }]
    );
    assert_eq!(d.errors_of(&name("east-2")).count(), 1);
    assert!(d.errors[0].to_string().contains("east-2"));
    assert!(d.cluster(&name("east-2")).is_none());
    assert_eq!(snapshot(&d), expected, "everything else is unaffected");
}

#[test]
fn names_at_the_length_limits() {
    let ns = format!("n{}", "s".repeat(62));
    let svc_name = format!("s{}", "v".repeat(62));
    let cluster = format!("c{}", "l".repeat(62));
    let mut m = sluice_mcs::MemberSnapshot::new(name(&cluster), id(&cluster), 0);
    m.namespaces.insert(ns.clone(), namespace(&ns, false));
    let k = ServiceKey::new(&ns, &svc_name);
    let mut svc = service(&svc_name, T0, &[("http", 80, 8080)]);
    svc.metadata.namespace = Some(ns.clone());
    m.services.insert(k.clone(), svc);
    m.slices.insert(
        k.clone(),
        vec![own_slice(
            &svc_name,
            "IPv4",
            &[("http", 8080)],
            &[("127.20.1.1", true)],
        )],
    );
    let mut e = export(&svc_name, T0);
    e.metadata.namespace = Some(ns.clone());
    m.exports.insert(k.clone(), e);
    // A ServiceExport at the 253-character object name limit: no such Service can exist.
    let long = ServiceKey::new(&ns, format!("{}.x", "a".repeat(251)));
    m.exports.insert(long.clone(), export(&long.name, T0));

    let d = run(&[m], &mut VipAllocator::new(), T1);
    let c = of(&d, &cluster);
    assert_eq!(c.slices.len(), 1);
    for (sk, s) in &c.slices {
        assert!(is_subdomain(&sk.name), "{}", sk.name);
        assert_eq!(s.metadata.name.as_deref(), Some(sk.name.as_str()));
        assert_eq!(
            s.metadata.labels.as_ref().unwrap()[LABEL_SOURCE_CLUSTER],
            cluster
        );
    }
    assert!(c.imports.contains_key(&k));
    assert_eq!(c.export_statuses[&long].conditions[0].reason, "NoService");
}

#[test]
fn weight_and_draining_reach_the_slices() {
    let mut members = east_exports_echo();
    let svc = members[0].services[&key("echo")].clone();
    let svc = annotate(
        annotate(svc, ANNOTATION_WEIGHT, "30"),
        ANNOTATION_DRAINING,
        "true",
    );
    members[0].services.insert(key("echo"), svc);
    serve(
        &mut members[1],
        annotate(
            service("echo", T1, &[("http", 80, 8080)]),
            ANNOTATION_WEIGHT,
            "lots",
        ),
        "127.21.1.1",
    );
    members[1].exports.insert(key("echo"), export("echo", T1));
    let d = run(&members, &mut VipAllocator::new(), T1);
    let a = |src: &str| {
        slices_from(&d, "west", "echo", src)[0]
            .metadata
            .annotations
            .clone()
            .unwrap()
    };
    assert_eq!(a("east")[ANNOTATION_WEIGHT], "30");
    assert_eq!(a("east")[ANNOTATION_DRAINING], "true");
    assert_eq!(
        a("west")[ANNOTATION_WEIGHT],
        "100",
        "unreadable weight: default"
    );
    assert_eq!(a("west")[ANNOTATION_DRAINING], "false");
}

#[test]
fn transition_times_survive_reconciles() {
    let mut members = east_exports_echo();
    let mut vips = VipAllocator::new();
    let d = run(&members, &mut vips, T0);
    write_back(&mut members, &d);
    let d = run(&members, &mut vips, T1);
    for c in &of(&d, "east").export_statuses[&key("echo")].conditions {
        assert_eq!(c.last_transition_time, time(T0), "{}", c.type_);
    }
    let imp = import(&d, "west", "echo");
    assert_eq!(
        imp.status.as_ref().unwrap().conditions[0].last_transition_time,
        time(T0)
    );

    // The Service goes: Valid and Ready change status (now T2); nothing else is stale.
    write_back(&mut members, &d);
    members[0].services.clear();
    let d = run(&members, &mut vips, T2);
    let valid = condition(&d, "east", "echo", CONDITION_VALID);
    assert_eq!(
        (valid.status.as_str(), valid.last_transition_time.clone()),
        ("False", time(T2))
    );
}

#[test]
fn a_new_conflict_does_not_change_the_import_type() {
    // West exports a ClusterSetIP service; east, older but dead, exports it Headless.
    let mut members = east_exports_echo();
    let headless = with_spec(
        members[0].services[&key("echo")].clone(),
        json!({"clusterIP": "None"}),
    );
    members[0].services.insert(key("echo"), headless);
    members[0].alive = false;
    serve(
        &mut members[1],
        service("echo", T1, &[("http", 80, 8080)]),
        "127.21.1.1",
    );
    members[1].exports.insert(key("echo"), export("echo", T1));
    let mut vips = VipAllocator::new();
    let d = run(&members, &mut vips, T1);
    let vip = import(&d, "west", "echo").spec.ips.clone();
    assert_eq!(vip.len(), 1);
    write_back(&mut members, &d);

    // East comes back: its export is the oldest, but switching the import to Headless
    // would take the VIP away from west's clients.
    members[0].alive = true;
    let d = run(&members, &mut vips, T2);
    for cluster in ["east", "west"] {
        let imp = import(&d, cluster, "echo");
        assert_eq!(imp.spec.r#type, ServiceImportType::ClusterSetIP);
        let c = condition(&d, cluster, "echo", CONDITION_CONFLICT);
        assert_eq!(c.reason, "TypeConflict");
        assert!(
            c.message.contains("keeps its type ClusterSetIP"),
            "{}",
            c.message
        );
    }
    assert_eq!(import(&d, "west", "echo").spec.ips, vip);
    write_back(&mut members, &d);

    // Once no export offers ClusterSetIP any more, the import follows the oldest.
    members[1].exports.clear();
    let d = run(&members, &mut vips, T2);
    let imp = import(&d, "west", "echo");
    assert_eq!(imp.spec.r#type, ServiceImportType::Headless);
    assert!(imp.spec.ips.is_empty());
}

#[test]
fn large_services_are_cut_into_several_slices() {
    let mut members = east_exports_echo();
    let endpoints: Vec<String> = (0..MAX_ENDPOINTS_PER_SLICE + 5)
        .map(|i| format!("127.20.{}.{}", 1 + i / 250, 1 + i % 250))
        .collect();
    let eps: Vec<(&str, bool)> = endpoints.iter().map(|e| (e.as_str(), true)).collect();
    members[0].slices.insert(
        key("echo"),
        vec![own_slice("echo", "IPv4", &[("http", 8080)], &eps)],
    );
    let d = run(&members, &mut VipAllocator::new(), T1);
    let slices = slices_from(&d, "west", "echo", "east");
    assert_eq!(slices.len(), 2);
    let total: usize = slices
        .iter()
        .map(|s| s.endpoints.as_ref().unwrap().len())
        .sum();
    assert_eq!(total, MAX_ENDPOINTS_PER_SLICE + 5);
    assert_ne!(slices[0].metadata.name, slices[1].metadata.name);
}

#[test]
fn stale_slices_are_only_our_own() {
    let members = east_exports_echo();
    let d = run(&members, &mut VipAllocator::new(), T1);
    let own = members[0].slices[&key("echo")][0].clone();
    let mut old_mcs = slices_from(&d, "east", "echo", "east")[0].clone();
    old_mcs.metadata.name = Some("echo-east-old".into());
    let ours_now = slices_from(&d, "east", "echo", "east")[0].clone();
    let stale = of(&d, "east").stale_slices([&own, &old_mcs, &ours_now]);
    assert_eq!(stale.len(), 1);
    assert_eq!(stale[0].name, "echo-east-old");
}

#[test]
fn a_cluster_without_a_vip_range_reports_it() {
    let mut members = east_exports_echo();
    members[1].index = 200;
    let d = run(&members, &mut VipAllocator::new(), T1);
    let imp = import(&d, "west", "echo");
    assert!(imp.spec.ips.is_empty());
    let ready = &imp.status.as_ref().unwrap().conditions[0];
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "Pending")
    );
    assert_eq!(
        d.errors,
        vec![ClusterError::Vips {
            cluster: name("west"),
            unassigned: 1,
            source: VipError::NoRange { index: 200 },
        }]
    );
    assert_eq!(
        import(&d, "east", "echo").spec.ips.len(),
        1,
        "east is unaffected"
    );
}

#[test]
fn reconcile_is_deterministic() {
    let mut members = east_exports_echo();
    serve(
        &mut members[1],
        service("echo", T1, &[("http", 80, 8080), ("grpc", 9000, 9090)]),
        "127.21.1.1",
    );
    members[1].exports.insert(key("echo"), export("echo", T1));
    let a = snapshot(&run(&members, &mut VipAllocator::new(), T1));
    members.reverse();
    let b = snapshot(&run(&members, &mut VipAllocator::new(), T1));
    assert_eq!(a, b, "member order does not matter");
}

/// A round over some services speaks for those only: other services' VIPs stay held and
/// their objects are not reported stale, while the scoped ones behave as in a full round.
#[test]
fn scoped_rounds_leave_other_services_alone() {
    let mut east = member("east", 0);
    for (svc, ip) in [("a", "127.20.1.1"), ("b", "127.20.1.2")] {
        serve(&mut east, service(svc, T0, &[("http", 80, 8080)]), ip);
        east.exports.insert(key(svc), export(svc, T0));
    }
    let mut members = vec![east, member("west", 1)];
    let mut vips = VipAllocator::new();
    let full = run(&members, &mut vips, T1);
    write_back(&mut members, &full);
    let vip_b = vips.get(&id("west"), &key("b")).unwrap();
    let observed: Vec<_> = of(&full, "west").slices.values().cloned().collect();

    // Only `a` changed (unexported); the snapshot holds only `a`'s objects, as the
    // controller's scoped snapshots do.
    members[0].exports.remove(&key("a"));
    let scope = sluice_mcs::Scope::Keys([key("a")].into());
    let mut scoped = members.clone();
    for m in &mut scoped {
        m.services.retain(|k, _| scope.contains(k));
        m.exports.retain(|k, _| scope.contains(k));
        m.imports.retain(|k, _| scope.contains(k));
        m.slices.retain(|k, _| scope.contains(k));
    }
    let d = sluice_mcs::reconcile_scoped(&scoped, &mut vips, &time(T2), &scope);
    let west = of(&d, "west");
    assert!(west.imports.is_empty() && west.slices.is_empty());
    assert_eq!(
        west.stale_imports(members[1].imports.values()),
        vec![key("a")],
        "b is out of scope, not stale"
    );
    let stale = west.stale_slices(&observed);
    assert_eq!(stale.len(), 1, "only a's slice: {stale:?}");
    assert!(stale[0].name.starts_with("a-"), "{stale:?}");
    assert_eq!(vips.get(&id("west"), &key("a")), None, "a's VIP freed");
    assert_eq!(
        vips.get(&id("west"), &key("b")),
        Some(vip_b),
        "b's VIP held"
    );

    // A later full round agrees with the scoped one.
    let again = run(&members, &mut vips, T2);
    assert_eq!(
        of(&again, "west").import_keys().collect::<Vec<_>>(),
        vec![&key("b")]
    );
    assert_eq!(vips.get(&id("west"), &key("b")), Some(vip_b));
}

#[test]
fn a_cluster_served_by_kube_proxy_gets_derived_services() {
    use sluice_api::sluice::ImportVips;
    use sluice_mcs::derived::{ANNOTATION_DERIVED_SERVICE, derived_key, derived_name};

    let mut members = east_exports_echo();
    members[1].import_vips = ImportVips::DerivedService;
    // west also has a headless export: headless imports need no derived Service.
    let mut db = with_spec(
        service("db", T0, &[("tcp", 5432, 5432)]),
        json!({"clusterIP": "None"}),
    );
    db.metadata.namespace = Some(NS.into());
    members[1].services.insert(key("db"), db);
    members[1].exports.insert(key("db"), export("db", T0));
    let mut vips = VipAllocator::new();
    let d = run(&members, &mut vips, T1);
    assert!(d.errors.is_empty(), "{:?}", d.errors);

    // east keeps Sluice's VIPs and gets no Service.
    assert_eq!(import(&d, "east", "echo").spec.ips, vec!["127.60.0.1"]);
    assert!(of(&d, "east").services.is_empty());

    // west: a derived Service with the import's ports; no address until it is allocated.
    let west = of(&d, "west");
    let dkey = derived_key(&key("echo"));
    assert_eq!(dkey.name, derived_name(&key("echo")));
    let svc = &west.services[&dkey];
    let labels = svc.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[LABEL_MANAGED_BY], MANAGED_BY);
    assert_eq!(labels[LABEL_SERVICE_NAME], "echo");
    let spec = svc.spec.as_ref().unwrap();
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert!(spec.selector.is_none() && spec.cluster_ip.is_none());
    let ports = spec.ports.as_ref().unwrap();
    assert_eq!(
        (ports[0].name.as_deref(), ports[0].port),
        (Some("http"), 80)
    );
    assert_eq!(
        west.services.len(),
        1,
        "no derived Service for a headless import"
    );
    let imp = import(&d, "west", "echo");
    assert!(imp.spec.ips.is_empty());
    assert_eq!(
        imp.metadata.annotations.as_ref().unwrap()[ANNOTATION_DERIVED_SERVICE],
        dkey.name
    );
    assert_eq!(
        vips.get(&id("west"), &key("echo")),
        None,
        "no Sluice VIP held"
    );
    // The MCS slices in west name the derived Service for kube-proxy; east's do not.
    for s in slices_from(&d, "west", "echo", "east") {
        assert_eq!(
            s.metadata.labels.as_ref().unwrap()["kubernetes.io/service-name"],
            dkey.name
        );
    }
    for s in slices_from(&d, "east", "echo", "east") {
        assert!(
            !s.metadata
                .labels
                .as_ref()
                .unwrap()
                .contains_key("kubernetes.io/service-name")
        );
    }

    // The API server allocates a ClusterIP: the import carries it. The derived Service is
    // never exported, even from a placed namespace.
    write_back(&mut members, &d);
    let mut observed = svc.clone();
    observed.spec.as_mut().unwrap().cluster_ip = Some("127.41.0.9".into());
    observed.spec.as_mut().unwrap().cluster_ips = Some(vec!["127.41.0.9".into()]);
    members[1].services.insert(dkey.clone(), observed.clone());
    members[1].namespaces.insert(NS.into(), namespace(NS, true));
    let d2 = run(&members, &mut vips, T2);
    let imp = import(&d2, "west", "echo");
    assert_eq!(imp.spec.ips, vec!["127.41.0.9"]);
    assert_eq!(imp.spec.ip_families, vec!["IPv4"]);
    assert!(
        of(&d2, "east").imports.keys().all(|k| k.name != dkey.name),
        "a derived Service was exported"
    );
    assert!(of(&d2, "west").stale_services([&observed]).is_empty());

    // Unexported: the derived Service is stale.
    write_back(&mut members, &d2);
    members[0].exports.clear();
    let d3 = run(&members, &mut vips, T2);
    assert_eq!(of(&d3, "west").stale_services([&observed]), vec![dkey]);
}

/// MCS conformance (v0.5.0, "should expose the union of the constituent service ports and
/// raise a conflict"): ports that merge cleanly still differ between the exports, so each
/// export reports a PortConflict while the import carries the union.
#[test]
fn a_clean_port_union_of_differing_exports_is_still_a_conflict() {
    let mut members = east_exports_echo();
    serve(
        &mut members[1],
        service("echo", T1, &[("http", 80, 8080), ("stcp", 142, 142)]),
        "127.21.1.1",
    );
    members[1].exports.insert(key("echo"), export("echo", T1));
    let d = run(&members, &mut VipAllocator::new(), T2);
    let names: Vec<Option<&str>> = import(&d, "east", "echo")
        .spec
        .ports
        .iter()
        .map(|p| p.name.as_deref())
        .collect();
    assert!(
        names.contains(&Some("http")) && names.contains(&Some("stcp")),
        "{names:?}"
    );
    for cluster in ["east", "west"] {
        let c = condition(&d, cluster, "echo", CONDITION_CONFLICT);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "PortConflict")
        );
        assert!(c.message.contains("does not export"), "{}", c.message);
    }
    // Identical port sets: no conflict.
    let mut same = east_exports_echo();
    serve(
        &mut same[1],
        service("echo", T1, &[("http", 80, 8080)]),
        "127.21.1.1",
    );
    same[1].exports.insert(key("echo"), export("echo", T1));
    let d = run(&same, &mut VipAllocator::new(), T2);
    assert_eq!(
        condition(&d, "east", "echo", CONDITION_CONFLICT).status,
        "False"
    );
}
