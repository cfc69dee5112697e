//! A library that claims plugin ABI version 999 and has no table: the host must
//! refuse it after reading the version, without touching anything else.

/// The ABI version symbol, with a version no host speaks.
#[allow(unsafe_code)]
#[unsafe(no_mangle)]
pub extern "C" fn batchbench_plugin_abi_version() -> u32 {
    999
}
