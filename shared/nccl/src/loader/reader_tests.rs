//! NCCL's reader, case by case: what it keeps, skips and stops at.

use super::*;

fn names(r: &Read) -> Vec<&str> {
    r.elements.iter().map(|e| e.name.as_str()).collect()
}

/// Comments, unknown elements (with whatever they hold), single quotes
/// and attributes without a value are read as NCCL reads them.
#[test]
fn what_nccl_keeps_and_skips() {
    let r = read(
        "<!-- a comment -->\n<system version='1'>\n <foo><bar x=\"1\"/></foo>\n <cpu numaid=\"0\" flag>\n  <pci busid=\"0000:01:00.0\"><gpu/></pci>\n </cpu>\n</system>\n",
    );
    assert_eq!(r.error, None);
    assert_eq!(names(&r), ["system", "cpu", "pci", "gpu"]);
    assert_eq!(
        r.elements[1].attrs,
        [
            ("numaid".into(), "0".into()),
            ("flag".into(), String::new())
        ]
    );
    assert_eq!((r.elements[2].line, r.elements[2].parent), (5, Some(1)));
}

/// A space before `/>` or `>` is one more attribute, with an empty key,
/// as NCCL's own dumps show (` =""`).
#[test]
fn a_space_before_the_end_is_an_empty_attribute() {
    let r = read("<system version=\"1\" >\n<cpu numaid=\"0\" />\n</system>");
    assert_eq!(r.error, None);
    assert_eq!(r.elements[0].attrs.len(), 2);
    assert_eq!(r.elements[1].attrs[1], (String::new(), String::new()));
}

#[test]
fn line_breaks_inside_a_tag_and_mismatches_stop_it() {
    let e = read("<system version=\"1\">\n<cpu numaid=\"0\"\n arch=\"x86_64\"/>\n</system>")
        .error
        .unwrap();
    assert_eq!(
        (e.line, e.prints.as_str()),
        (2, "XML Parse : expected >, got '\n'")
    );
    let e = read("<system version=\"1\">\n<cpu numaid=\"0\">\n</system>")
        .error
        .unwrap();
    assert_eq!(
        (e.line, e.prints.as_str(), e.source),
        (3, "XML Mismatch : cpu / system", "src/graph/xml.cc:209")
    );
    let e = read("<system version=\"1\">\n<cpu numaid=0/>\n</system>")
        .error
        .unwrap();
    assert_eq!(e.prints, "XML Parse : Expected (double) quote.");
    let e = read("<system version=\"1\">\n<cpu numaid=\"0\">\n")
        .error
        .unwrap();
    assert_eq!(e.prints, "XML Parse : unterminated cpu");
    let e = read("<system version=\"1\"><!-- open").error.unwrap();
    assert_eq!(e.prints, "XML Parse error : unterminated comment");
}

/// 253 characters fit a value, 254 do not; the message quotes 254.
#[test]
fn value_length_limit() {
    let ok = format!("<system version=\"1\" name=\"{}\"/>", "a".repeat(253));
    assert_eq!(read(&ok).error, None);
    let bad = format!("<system version=\"1\" name=\"{}\"/>", "a".repeat(254));
    let e = read(&bad).error.unwrap();
    assert_eq!(
        e.prints,
        format!("Error : value {} too long (max 255)", "a".repeat(254))
    );
    assert_eq!(e.source, "src/graph/xml.cc:66");
}

/// 128 children fit one element, the 129th does not; 255 elements fit a
/// file, and the reader stops before it reads past the 256th.
#[test]
fn children_and_node_limits() {
    let cpus = |n: usize| {
        format!(
            "<system version=\"1\">\n{}</system>\n",
            "<cpu numaid=\"0\"/>\n".repeat(n)
        )
    };
    assert_eq!(read(&cpus(128)).error, None);
    let e = read(&cpus(129)).error.unwrap();
    assert_eq!(
        (e.line, e.prints.as_str()),
        (130, "Error : XML parser is limited to 128 subnodes")
    );
    let pcis = |n: usize| {
        format!(
            "<system version=\"1\">\n<cpu numaid=\"0\">\n{}</cpu>\n</system>\n",
            "<pci busid=\"0000:01:00.0\"><pci busid=\"0000:02:00.0\"/></pci>\n".repeat(n)
        )
    };
    // system + cpu + 2 x 126 = 254 elements.
    assert_eq!(read(&pcis(126)).error, None);
    // 256 elements: the reader stops at once.
    let e = read(&pcis(127)).error.unwrap();
    assert_eq!(e.prints, "Error : XML parser is limited to 256 nodes");
}

/// Unknown elements nested a million deep are skipped without recursion.
#[test]
fn deep_skipped_elements_do_not_overflow() {
    let deep = format!(
        "<system version=\"1\">{}{}</system>",
        "<x>".repeat(1_000_000),
        "</x>".repeat(1_000_000)
    );
    let r = read(&deep);
    assert_eq!(r.error, None);
    assert_eq!(names(&r), ["system"]);
}
