//! Lists the devices of the PJRT CPU plugin: `cargo run -p tessera-examples --example devices`.

use tessera::pjrt::Client;

fn main() -> anyhow::Result<()> {
    let client = Client::cpu(8)?;
    println!("platform: {}", client.platform_name()?);
    for device in client.addressable_devices()? {
        let info = device.info()?;
        println!("device {} ({}): {}", info.id, info.kind, info.description);
    }
    Ok(())
}
