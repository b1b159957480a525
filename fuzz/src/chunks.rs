//! A chunking plan chosen by the fuzzer: the input starts with a count `n` (one byte, at most 16
//! used) and `n` little-endian `u16` chunk sizes, and the rest is the data to cut. Chunk sizes are
//! used in turn, cycling; a size of 0 means 1. Targets that feed bytes incrementally use it to
//! check that the outcome does not depend on where the cuts fall.

/// The chunk sizes and the data of one input.
pub struct Plan<'a> {
    sizes: Vec<usize>,
    pub data: &'a [u8],
}

/// Splits an input into its chunk sizes and its data.
pub fn plan(input: &[u8]) -> Plan<'_> {
    let Some((&n, rest)) = input.split_first() else {
        return Plan { sizes: vec![usize::MAX], data: &[] };
    };
    let n = usize::from(n % 17);
    let header = (n * 2).min(rest.len());
    let sizes: Vec<usize> = rest[..header]
        .chunks_exact(2)
        .map(|pair| usize::from(u16::from_le_bytes([pair[0], pair[1]])).max(1))
        .collect();
    let sizes = if sizes.is_empty() { vec![usize::MAX] } else { sizes };
    Plan { sizes, data: &rest[header..] }
}

impl<'a> Plan<'a> {
    /// The data cut into consecutive chunks following the plan.
    pub fn pieces(&self) -> Vec<&'a [u8]> {
        let mut out = Vec::new();
        let mut rest = self.data;
        for &size in self.sizes.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (head, tail) = rest.split_at(size.min(rest.len()));
            out.push(head);
            rest = tail;
        }
        out
    }
}

/// The input bytes that make `plan` cut `data` into chunks of `sizes`.
pub fn encode(sizes: &[u16], data: &[u8]) -> Vec<u8> {
    let mut out = vec![u8::try_from(sizes.len().min(16)).expect("≤ 16")];
    for size in sizes.iter().take(16) {
        out.extend_from_slice(&size.to_le_bytes());
    }
    out.extend_from_slice(data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_cuts_every_byte_once() {
        let input = encode(&[3, 0], b"abcdefg");
        let pieces = plan(&input).pieces();
        assert_eq!(pieces, vec![&b"abc"[..], b"d", b"efg"]);
        assert_eq!(plan(&[]).pieces().len(), 0);
    }
}
