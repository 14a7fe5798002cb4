//! The layout tracefs publishes for its binary records (events/*/format and
//! events/header_page): field names, offsets and sizes, so that the tracer can
//! read `trace_pipe_raw` pages — ns timestamps and no text formatting in the
//! kernel — instead of the text trace. Pure: the format text in, layouts out.

use std::collections::BTreeMap;

/// One field of an event record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub offset: usize,
    pub size: usize,
    pub signed: bool,
    /// `__data_loc`: the field holds (length << 16 | offset) of the data.
    pub data_loc: bool,
}

impl Field {
    /// The field as an unsigned integer (sign-extended when signed), or None
    /// when the record is too short.
    pub fn read_u64(&self, rec: &[u8]) -> Option<u64> {
        let b = rec.get(self.offset..self.offset + self.size)?;
        Some(match (self.size, self.signed) {
            (1, false) => b[0] as u64,
            (1, true) => b[0] as i8 as i64 as u64,
            (2, false) => u16::from_ne_bytes([b[0], b[1]]) as u64,
            (2, true) => i16::from_ne_bytes([b[0], b[1]]) as i64 as u64,
            (4, false) => u32::from_ne_bytes(b.try_into().ok()?) as u64,
            (4, true) => i32::from_ne_bytes(b.try_into().ok()?) as i64 as u64,
            (8, _) => u64::from_ne_bytes(b.try_into().ok()?),
            _ => return None,
        })
    }

    /// A NUL-terminated char array, or the string a `__data_loc` points to.
    pub fn read_str<'a>(&self, rec: &'a [u8]) -> Option<&'a str> {
        let b = if self.data_loc {
            let loc = self.read_u64(rec)? as u32;
            let (off, len) = ((loc & 0xffff) as usize, (loc >> 16) as usize);
            rec.get(off..off + len)?
        } else {
            rec.get(self.offset..self.offset + self.size)?
        };
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        std::str::from_utf8(&b[..end]).ok()
    }
}

/// One event's layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFormat {
    pub name: String,
    pub id: u16,
    pub fields: BTreeMap<String, Field>,
}

impl EventFormat {
    pub fn field(&self, name: &str) -> Option<Field> {
        self.fields.get(name).copied()
    }
}

/// Parse an events/<group>/<name>/format file.
pub fn parse_format(text: &str) -> Option<EventFormat> {
    let mut name = None;
    let mut id = None;
    let mut fields = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(n) = line.strip_prefix("name:") {
            name = Some(n.trim().to_string());
        } else if let Some(i) = line.strip_prefix("ID:") {
            id = i.trim().parse().ok();
        } else if let Some(f) = line.strip_prefix("field:") {
            // "unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;"
            let mut parts = f.split(';').map(str::trim);
            let decl = parts.next()?;
            let mut offset = None;
            let mut size = None;
            let mut signed = false;
            for p in parts {
                if let Some(v) = p.strip_prefix("offset:") {
                    offset = v.parse().ok();
                } else if let Some(v) = p.strip_prefix("size:") {
                    size = v.parse().ok();
                } else if let Some(v) = p.strip_prefix("signed:") {
                    signed = v == "1";
                }
            }
            let data_loc = decl.starts_with("__data_loc");
            let fname = decl
                .rsplit(|c: char| c.is_whitespace() || c == '*')
                .next()?
                .split('[')
                .next()?
                .to_string();
            if let (Some(offset), Some(size)) = (offset, size) {
                fields.insert(
                    fname,
                    Field {
                        offset,
                        size,
                        signed,
                        data_loc,
                    },
                );
            }
        }
    }
    Some(EventFormat {
        name: name?,
        id: id?,
        fields,
    })
}

/// Where a ring-buffer page keeps its timestamp, its commit (bytes of data)
/// and its data (events/header_page).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageHeader {
    pub timestamp: Field,
    pub commit: Field,
    pub data_offset: usize,
}

pub fn parse_header_page(text: &str) -> Option<PageHeader> {
    let f = parse_format(&format!("name: header_page\nID: 0\n{text}"))?;
    Some(PageHeader {
        timestamp: f.field("timestamp")?,
        commit: f.field("commit")?,
        data_offset: f.field("data")?.offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const SWITCH: &str = "name: sched_switch\nID: 372\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n\nprint fmt: \"prev_comm=%s\"\n";

    #[test]
    fn formats_and_header_page() {
        let f = parse_format(SWITCH).unwrap();
        assert_eq!((f.name.as_str(), f.id), ("sched_switch", 372));
        assert_eq!(
            f.field("prev_comm"),
            Some(Field {
                offset: 8,
                size: 16,
                signed: false,
                data_loc: false
            })
        );
        assert_eq!(f.field("next_pid").unwrap().offset, 56);
        let irq = parse_format("name: irq_handler_entry\nID: 225\nformat:\n\tfield:int irq;\toffset:8;\tsize:4;\tsigned:1;\n\tfield:__data_loc char[] name;\toffset:12;\tsize:4;\tsigned:0;\n").unwrap();
        assert!(irq.field("name").unwrap().data_loc);
        let h = parse_header_page("\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n\tfield: char data;\toffset:16;\tsize:4080;\tsigned:0;\n").unwrap();
        assert_eq!((h.commit.offset, h.data_offset), (8, 16));
        assert!(parse_format("garbage").is_none());
    }

    #[test]
    fn strings_and_integers_from_a_record() {
        let mut rec = vec![0u8; 24];
        rec[8..12].copy_from_slice(&(-3i32).to_ne_bytes());
        rec[12..16].copy_from_slice(&((5u32 << 16) | 16).to_ne_bytes());
        rec[16..21].copy_from_slice(b"virt\0");
        let irq = Field {
            offset: 8,
            size: 4,
            signed: true,
            data_loc: false,
        };
        assert_eq!(irq.read_u64(&rec), Some(-3i64 as u64));
        let name = Field {
            offset: 12,
            size: 4,
            signed: false,
            data_loc: true,
        };
        assert_eq!(name.read_str(&rec), Some("virt"));
        let short = Field {
            offset: 20,
            size: 8,
            signed: false,
            data_loc: false,
        };
        assert_eq!(short.read_u64(&rec), None);
    }
}
