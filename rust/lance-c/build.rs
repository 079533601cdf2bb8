// Gives the shared library a SONAME, so that executables linking it record
// its name rather than the path it was linked from.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,liblance_c.so");
}
