// The QEMU provider against the provider contract (test/provider-contract.ts).
import { QemuProvider } from "../../src/providers/qemu/qemu-provider.js";
import { providerContract } from "../provider-contract.js";

providerContract("qemu", { make: (paths, o) => new QemuProvider({ paths, killOnExit: o.killOnExit }) });
