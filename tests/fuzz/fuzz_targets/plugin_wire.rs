//! The JSON an external plugin sends back across the boundary: a trajectory,
//! route extras and a reply, each checked as the hosts check them.
#![no_main]

use batchbench_contract::plugin::RouteExtras;
use batchbench_contract::wire::{WireReply, WireRouteExtras, WireTrajectory};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(t) = WireTrajectory::parse("fuzz", data) {
        if t.check("fuzz").is_ok() {
            let traj = t.into_trajectory();
            let _ = traj.requests.count();
        }
    }
    if let Ok(x) = serde_json::from_slice::<WireRouteExtras>(data) {
        let mut out = RouteExtras::default();
        let _ = x.append_to("fuzz", &mut out);
    }
    if let Ok(r) = serde_json::from_slice::<WireReply>(data) {
        let _ = r.into_reply(&[std::time::Instant::now()]);
    }
});
