//! Typed params with errors that name the field (`-32602`), using `serde_path_to_error` over
//! the `ahp-types` command structs.
//!
//! Pure functions; touches nothing.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::RpcError;

/// Decodes `params` into `T`; on failure a -32602 whose message names the offending field,
/// e.g. ``invalid params: claim: missing field `chat` ``.
pub fn decode<T: DeserializeOwned>(params: &Value) -> Result<T, RpcError> {
    let de = params.clone();
    serde_path_to_error::deserialize::<_, T>(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." || path.is_empty() {
            RpcError::invalid_params(format!("invalid params: {inner}"))
        } else {
            RpcError::invalid_params(format!("invalid params: {path}: {inner}"))
        }
    })
}
