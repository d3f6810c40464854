//! Blobs and applications: content-addressed bytes in the Blobs column, and installed
//! applications (their bytecode a blob, their metadata in the Application column).

use borsh::BorshSerialize;
use weft_primitives::{ApplicationId, ApplicationMeta, BlobId, BlobMeta, Hash};
use weft_store::schema::{ApplicationKey, BlobKey};
use weft_store::{Backend, Prefix, Read};

use super::{NodeService, ServiceError};

/// Longest application name or version string, in bytes.
pub const MAX_APP_LABEL: usize = 256;

impl<B: Backend> NodeService<B> {
    /// Stores a blob; its id is the blake3 hash of its bytes, so storing it again is a no-op.
    pub fn blob_put(&self, data: &[u8]) -> Result<BlobId, ServiceError> {
        self.check_blob_size("blob", data.len())?;
        let blob_id = BlobId::from_bytes(*Hash::digest(data).as_bytes());
        self.store().put(&BlobKey { blob_id }, data)?;
        Ok(blob_id)
    }

    /// A blob's bytes.
    pub fn blob_get(&self, blob_id: &BlobId) -> Result<Vec<u8>, ServiceError> {
        self.store()
            .get(&BlobKey { blob_id: *blob_id })?
            .ok_or_else(|| ServiceError::NotFound { what: "blob", id: blob_id.to_hex() })
    }

    fn check_blob_size(&self, what: &'static str, size: usize) -> Result<(), ServiceError> {
        let max = usize::try_from(self.limits.max_blob_bytes).unwrap_or(usize::MAX);
        if size > max {
            return Err(ServiceError::TooLarge { what, size, max });
        }
        Ok(())
    }

    /// Installs an application: its bytecode as a blob and its metadata in the Application
    /// column, in one batch. The id is derived from name, version and bytecode, so installing
    /// the same thing twice gives the same id.
    pub fn app_install(&self, name: &str, version: &str, bytecode: &[u8]) -> Result<ApplicationId, ServiceError> {
        if name.is_empty() {
            return Err(ServiceError::BadInput("an application needs a name".into()));
        }
        for (what, label) in [("name", name), ("version", version)] {
            if label.len() > MAX_APP_LABEL {
                return Err(ServiceError::BadInput(format!(
                    "application {what} is {} bytes, at most {MAX_APP_LABEL} allowed",
                    label.len()
                )));
            }
        }
        self.check_blob_size("bytecode", bytecode.len())?;
        let hash = Hash::digest(bytecode);
        let blob_id = BlobId::from_bytes(*hash.as_bytes());
        let application_id = application_id_of(name, version, &blob_id);
        let size = u64::try_from(bytecode.len()).unwrap_or(u64::MAX);
        let meta = ApplicationMeta {
            application_id,
            name: name.to_string(),
            version: version.to_string(),
            bytecode: BlobMeta { blob_id, size, hash },
            // No compiler runs on install (yet): no precompiled artifact.
            compiled: BlobMeta { blob_id: BlobId::default(), size: 0, hash: Hash::ZERO },
            size,
            source: String::new(),
            metadata: Vec::new(),
            services: Vec::new(),
        };
        let mut batch = self.store().batch();
        batch.put(&BlobKey { blob_id }, bytecode);
        batch.put(&ApplicationKey { application_id }, &meta);
        {
            let _uses = self.uses_lock();
            self.store().write(batch)?;
        }
        // Upgrades to it that could not finish here without it finish now.
        self.application_arrived(&application_id);
        Ok(application_id)
    }

    /// Every installed application, by id.
    pub fn app_list(&self) -> Result<Vec<ApplicationMeta>, ServiceError> {
        let rows = self.store().scan(Prefix::<ApplicationKey>::family()).collect_all()?;
        Ok(rows.into_iter().map(|(_, meta)| meta).collect())
    }

    pub(super) fn application(&self, application: Option<ApplicationId>) -> Result<ApplicationMeta, ServiceError> {
        match application {
            Some(application_id) => self
                .store()
                .get(&ApplicationKey { application_id })?
                .ok_or_else(|| ServiceError::NotFound { what: "application", id: application_id.to_hex() }),
            None => Ok(ApplicationMeta::default()),
        }
    }
}

/// `derive("weft application id v1", borsh(name, version, bytecode blob id))`.
pub fn application_id_of(name: &str, version: &str, bytecode: &BlobId) -> ApplicationId {
    let mut bytes = Vec::new();
    // Serializing into a Vec cannot fail.
    let _ = (name, version, bytecode).serialize(&mut bytes);
    ApplicationId::from_bytes(*Hash::derive("weft application id v1", &bytes).as_bytes())
}
