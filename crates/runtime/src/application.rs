//! A compiled application, ready to instantiate: its module pre-linked against the `weft_v1`
//! imports and the methods it exports.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use wasmtime::{ExternType, Instance, InstancePre, Linker, Module, Store};
use weft_primitives::{ApplicationId, Hash};

use crate::call::CallState;
use crate::{abi, CompileError};

/// A compiled application. Cheap to clone (shared); the runtime caches one per application id.
#[derive(Clone)]
pub struct Application {
    inner: Arc<Inner>,
}

struct Inner {
    id: ApplicationId,
    bytecode_hash: Hash,
    pre: InstancePre<CallState>,
    methods: BTreeSet<String>,
}

impl Application {
    /// Links a compiled `module` (checked against the ABI first).
    pub(crate) fn new(
        linker: &Linker<CallState>,
        id: ApplicationId,
        bytecode_hash: Hash,
        module: Module,
    ) -> Result<Self, CompileError> {
        abi::check_module(&module)?;
        // Methods are the exported functions that take and return nothing.
        let methods = module
            .exports()
            .filter(|export| match export.ty() {
                ExternType::Func(ty) => ty.params().len() == 0 && ty.results().len() == 0,
                _ => false,
            })
            .map(|export| export.name().to_owned())
            .collect();
        let pre = linker.instantiate_pre(&module).map_err(|e| CompileError::InvalidModule { reason: e.to_string() })?;
        Ok(Application { inner: Arc::new(Inner { id, bytecode_hash, pre, methods }) })
    }

    /// The application's id.
    pub fn id(&self) -> ApplicationId {
        self.inner.id
    }

    /// blake3 of the bytecode it was compiled from.
    pub fn bytecode_hash(&self) -> Hash {
        self.inner.bytecode_hash
    }

    /// The methods it exports, in name order.
    pub fn methods(&self) -> impl Iterator<Item = &str> {
        self.inner.methods.iter().map(String::as_str)
    }

    /// Whether it exports `method`.
    pub fn has_method(&self, method: &str) -> bool {
        self.inner.methods.contains(method)
    }

    /// The compiled module.
    pub(crate) fn module(&self) -> &Module {
        self.inner.pre.module()
    }

    /// A new instance in `store`.
    pub(crate) fn instantiate(&self, store: &mut Store<CallState>) -> wasmtime::Result<Instance> {
        self.inner.pre.instantiate(store)
    }
}

impl fmt::Debug for Application {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Application")
            .field("id", &self.inner.id)
            .field("bytecode_hash", &self.inner.bytecode_hash)
            .field("methods", &self.inner.methods)
            .finish()
    }
}
