//! The Python side (clients/python): its pytest suite against real `guirl serve`
//! processes and real exports, run with the .venv that scripts/setup.sh makes.

#[test]
fn python_client_suite_passes() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup.sh (it installs clients/python and its test dependencies)",
        python.display()
    );
    let out = std::process::Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "clients/python/tests"])
        .current_dir(root)
        .env("GUIRL_BIN", env!("CARGO_BIN_EXE_guirl"))
        .output()
        .expect("runs pytest");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{text}");
    assert!(out.status.success(), "the Python client's tests failed:\n{text}");
}
