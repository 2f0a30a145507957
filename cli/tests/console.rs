#![allow(clippy::unwrap_used)]
//! The console in headless Chromium while `dev up` runs a move and a drain under load:
//! the page shows the move's phases in order, the traffic share crossing from east to
//! west, the drain's progress, and a refusal for a user without rights; every request of
//! the load is counted. Screenshots go to `target/tmp/console/` (look at them).

use crate::support;

#[path = "support/browser.rs"]
mod browser;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use browser::Browser;
use serde_json::Value;
use support::clusterset::{APP, Load, Restarted, answering_vip};
use support::{DevUp, Kubectl, sluice_bin};

const WITHIN: Duration = Duration::from_secs(180);

fn shots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// What the page shows now: the namespace's phase and timeline, the traffic shares of
/// `web`, the clusters' drain state, the last action's result.
fn seen(b: &Browser) -> Value {
    b.script(
        r#"
        const ns = document.querySelector('tr[data-ns="root/shop"]');
        const steps = Array.from(document.querySelectorAll('ol[data-ns="root/shop"] li'))
            .map(li => li.classList.contains('done') ? 'done' : li.dataset.phase);
        const web = document.querySelector('[data-service="root/shop/web"]');
        const clusters = {};
        for (const c of document.querySelectorAll('[data-cluster][data-ready]')) {
            clusters[c.dataset.cluster] = {draining: c.dataset.draining === 'true',
                left: Number(c.dataset.left), text: c.querySelector('.left').textContent};
        }
        const result = document.getElementById('action-result');
        return {
            phase: ns ? ns.dataset.phase : null,
            on: ns ? ns.dataset.clusters : null,
            steps,
            east: web && web.dataset.shareEast !== undefined ? Number(web.dataset.shareEast) : null,
            west: web && web.dataset.shareWest !== undefined ? Number(web.dataset.shareWest) : null,
            clusters,
            result: result.textContent,
            code: result.dataset.code || null,
            live: document.getElementById('live').textContent,
        };
        "#,
    )
}

/// Poll the page every 200 ms until `done` holds for what it shows (panics after `within`);
/// every sample is kept.
fn watch(b: &Browser, within: Duration, mut done: impl FnMut(&Value) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + within;
    let mut samples = Vec::new();
    loop {
        let s = seen(b);
        let stop = done(&s);
        samples.push(s);
        if stop {
            return samples;
        }
        assert!(
            Instant::now() < deadline,
            "the page never showed it; last: {}",
            samples.last().unwrap()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `want` appear in `steps` in this order (others may come between).
fn in_order(steps: &[String], want: &[&str]) -> bool {
    let mut it = steps.iter();
    want.iter().all(|w| it.any(|s| s == w))
}

fn steps_of(s: &Value) -> Vec<String> {
    s["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap_or_default().to_string())
        .collect()
}

/// A kubeconfig for ServiceAccount `viewer` of root: it may read namespaces and clusters,
/// and change nothing.
fn viewer(control: &Kubectl, dev: &DevUp) -> PathBuf {
    control.ok(&["-n", "default", "create", "serviceaccount", "viewer"]);
    control.ok(&[
        "create",
        "clusterrole",
        "cluster-viewer",
        "--verb=get,list,watch",
        "--resource=clusters.sluice.dev,namespaces,events,placements.sluice.dev",
    ]);
    control.ok(&[
        "create",
        "clusterrolebinding",
        "viewer",
        "--clusterrole=cluster-viewer",
        "--serviceaccount=default:viewer",
    ]);
    let token = control.ok(&["-n", "default", "create", "token", "viewer"]);
    let path = dev.state.join("viewer.kubeconfig");
    std::fs::copy(dev.state.join("control.kubeconfig"), &path).unwrap();
    let kc = |args: &[&str]| {
        let st = Command::new(&support::kubectls()[0])
            .arg("--kubeconfig")
            .arg(&path)
            .args(args)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "kubectl {args:?}");
    };
    kc(&[
        "config",
        "set-credentials",
        "viewer",
        &format!("--token={}", token.trim()),
    ]);
    kc(&["config", "set-context", "--current", "--user=viewer"]);
    path
}

/// A `sluice console` of its own (killed on drop) and its URL.
fn console(kubeconfig: &std::path::Path) -> (Restarted, String) {
    let mut child = Command::new(sluice_bin())
        .arg("console")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let url = line.trim().strip_prefix("console: ").unwrap().to_string();
    (Restarted(child), url)
}

#[test]
fn the_console_shows_a_move_and_a_drain_live_and_refuses_a_user_without_rights() {
    let (dev, _) = DevUp::start("east,west");
    let control = dev.kubectl_control();
    let west = dev.kubectl("west");
    control.apply_stdin(APP);
    control.ok(&[
        "-n",
        "shop",
        "rollout",
        "status",
        "deployment/web",
        "--timeout=180s",
    ]);
    let vip = answering_vip(&west, "shop");
    let load = Load::start("http1", &format!("{vip}:80"), 3600, None);
    let url = std::fs::read_to_string(dev.state.join("console.url")).unwrap();
    let url = url.trim();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.contains("?token="),
        "{url}"
    );
    // Without the token: nothing but a pointer to the printed URL.
    let bare = url.split('?').next().unwrap();

    let b = Browser::start();
    b.open(bare);
    assert!(
        b.script("return document.body.innerText")
            .as_str()
            .unwrap()
            .contains("access token"),
        "the page without its token is refused"
    );
    b.open(url);
    // Placed on east, every request answered by east.
    watch(&b, WITHIN, |s| {
        s["phase"] == "placed" && s["live"] == "live" && s["east"].as_f64() == Some(1.0)
    });
    let dir = shots();
    b.screenshot(&dir.join("1-placed-on-east.png"));

    // Move it from the page: the target chosen, the Move button clicked.
    b.script(
        r#"const s = document.querySelector('select[aria-label="Target cluster for root/shop"]');
           s.value = 'west'; return s.value;"#,
    );
    b.click(r#"button[aria-label="Move root/shop"]"#);
    let mut shot_mid = false;
    let samples = watch(&b, WITHIN, |s| {
        if !shot_mid && (s["phase"] == "shifting" || s["phase"] == "draining") {
            b.screenshot(&dir.join("2-moving.png"));
            shot_mid = true;
        }
        steps_of(s).iter().any(|l| l == "done") && s["west"].as_f64() == Some(1.0)
    });
    let last = samples.last().unwrap();
    assert!(
        last["result"]
            .as_str()
            .unwrap()
            .contains("is to run on west"),
        "{last}"
    );
    let steps = steps_of(last);
    assert!(
        in_order(
            &steps,
            &["placed", "moving", "shifting", "draining", "done"]
        ),
        "the move's phases in order: {steps:?}"
    );
    // The share crossed: east answered everything, then both, then west everything.
    let west_share: Vec<f64> = samples.iter().filter_map(|s| s["west"].as_f64()).collect();
    assert!(
        west_share.iter().any(|w| *w > 0.05 && *w < 0.95),
        "a second answered by both: {west_share:?}"
    );
    b.screenshot(&dir.join("3-moved-to-west.png"));

    // Drain west from the page: shop leaves it (back to east), the card counts it down.
    b.click(r#"button[aria-label="Drain west"]"#);
    let mut shot_drain = false;
    let samples = watch(&b, WITHIN, |s| {
        let w = &s["clusters"]["west"];
        if !shot_drain && w["draining"] == true && w["left"].as_u64() == Some(1) {
            b.screenshot(&dir.join("4-draining-west.png"));
            shot_drain = true;
        }
        w["draining"] == true && w["left"].as_u64() == Some(0) && s["on"] == "east"
    });
    assert!(
        samples
            .iter()
            .any(|s| s["clusters"]["west"]["left"].as_u64() == Some(1)),
        "the drain's progress was shown"
    );
    let last = samples.last().unwrap();
    assert!(
        last["clusters"]["west"]["text"]
            .as_str()
            .unwrap()
            .contains("drained"),
        "{last}"
    );
    b.screenshot(&dir.join("5-west-drained.png"));
    b.click(r#"button[aria-label="Uncordon west"]"#);
    watch(&b, WITHIN, |s| s["clusters"]["west"]["draining"] == false);

    // Someone who may only look: the page shows the clusterset, an action is refused with
    // the API server's words, and nothing changes.
    let viewer = viewer(&control, &dev);
    let (_console, url) = console(&viewer);
    b.open(&url);
    // (shop may be on its way back to west, where its label pins it, now that west is
    // uncordoned: where it runs does not matter here.)
    watch(&b, WITHIN, |s| {
        s["on"].is_string() && s["clusters"]["east"].is_object()
    });
    b.click(r#"button[aria-label="Drain east"]"#);
    let refused = watch(&b, WITHIN, |s| s["code"].is_string());
    let last = refused.last().unwrap();
    assert_eq!(last["code"], "403", "{last}");
    assert!(
        last["result"]
            .as_str()
            .unwrap()
            .contains("system:serviceaccount:default:viewer"),
        "{last}"
    );
    b.screenshot(&dir.join("6-refused.png"));
    let cordoned = control.ok(&[
        "get",
        "clusters.sluice.dev",
        "east",
        "-o",
        "jsonpath={.spec.unschedulable}",
    ]);
    assert_ne!(cordoned.trim(), "true", "the refused drain changed nothing");

    let counted = load.stop();
    assert_eq!(counted.failed, 0, "{counted:?}");
    assert!(counted.ok > 0, "{counted:?}");
}
