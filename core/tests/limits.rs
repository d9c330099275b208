//! Limits are validated at construction: an invalid one cannot be held.

use ratewindow_core::{Limit, LimitField, Window, MAX_WINDOW_MS};

#[test]
fn uses_must_be_between_1_and_u32_max() {
    assert_eq!(Limit::new(0, 1000).unwrap_err().field, LimitField::Uses);
    assert_eq!(
        Limit::new(u32::MAX as u64 + 1, 1000).unwrap_err().field,
        LimitField::Uses
    );
    assert_eq!(Limit::new(u32::MAX as u64, 1000).unwrap().uses(), u32::MAX);
}

#[test]
fn window_must_be_between_1_and_the_maximum() {
    assert_eq!(Limit::new(1, 0).unwrap_err().field, LimitField::WindowMs);
    assert_eq!(
        Limit::new(1, MAX_WINDOW_MS + 1).unwrap_err().field,
        LimitField::WindowMs
    );
    assert_eq!(
        Limit::new(1, MAX_WINDOW_MS).unwrap().window_ms(),
        MAX_WINDOW_MS
    );
    assert!(Window::from_ms(0).is_err());
}

#[test]
fn host_numbers_must_be_whole_finite_and_in_range() {
    for bad in [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -1.0,
        1.5,
        4294967296.0,
    ] {
        assert_eq!(
            Limit::from_f64(bad, 1000.0).unwrap_err().field,
            LimitField::Uses,
            "{bad}"
        );
    }
    for bad in [
        f64::NAN,
        f64::INFINITY,
        0.0,
        -0.5,
        2.5,
        (MAX_WINDOW_MS + 1) as f64,
    ] {
        assert_eq!(
            Limit::from_f64(1.0, bad).unwrap_err().field,
            LimitField::WindowMs,
            "{bad}"
        );
    }
    assert_eq!(
        Limit::from_f64(3.0, 10_000.0).unwrap(),
        Limit::new(3, 10_000).unwrap()
    );
}

#[test]
fn the_error_names_the_field_the_value_and_the_range() {
    let e = Limit::from_f64(f64::NAN, 1000.0).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid uses: NaN (expected a whole number from 1 to 4294967295)"
    );
    let e = Limit::new(1, 0).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid window_ms: 0 (expected a whole number of milliseconds from 1 to 4320000000000000)"
    );
}

#[test]
fn constructors_per_second_minute_hour_day() {
    assert_eq!(Limit::per_second(5).unwrap().window_ms(), 1_000);
    assert_eq!(Limit::per_minute(5).unwrap().window_ms(), 60_000);
    assert_eq!(Limit::per_hour(5).unwrap().window_ms(), 3_600_000);
    assert_eq!(Limit::per_day(5).unwrap().window_ms(), 86_400_000);
    assert!(Limit::per_minute(0).is_err());
}

#[test]
fn deserialising_validates() {
    let ok: Limit = serde_json::from_str(r#"{"uses":2,"window_ms":1000}"#).unwrap();
    assert_eq!(ok, Limit::new(2, 1000).unwrap());
    assert!(serde_json::from_str::<Limit>(r#"{"uses":0,"window_ms":1000}"#).is_err());
    assert!(serde_json::from_str::<Window>("0").is_err());
    assert_eq!(
        serde_json::to_string(&ok).unwrap(),
        r#"{"uses":2,"window_ms":1000}"#
    );
}
