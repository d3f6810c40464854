//! Blobs the node holds, read by id (their blake3 hash), whole or in chunks.

use crate::sys;

/// Blob `id`'s length, if the node holds it.
pub fn len(id: &[u8; 32]) -> Option<u64> {
    u64::try_from(sys::blob_read(id, 0, &mut [])).ok()
}

/// Reads blob `id` from `offset` into `buf`: the number of bytes read (0 past the end), or
/// `None` if the node does not hold the blob.
pub fn read_at(id: &[u8; 32], offset: u64, buf: &mut [u8]) -> Option<usize> {
    let total = u64::try_from(sys::blob_read(id, offset, buf)).ok()?;
    Some(total.saturating_sub(offset).min(buf.len() as u64) as usize)
}

/// Blob `id` whole, if the node holds it.
pub fn read(id: &[u8; 32]) -> Option<Vec<u8>> {
    let mut buf = vec![0; usize::try_from(len(id)?).ok()?];
    let n = read_at(id, 0, &mut buf)?;
    buf.truncate(n);
    Some(buf)
}
