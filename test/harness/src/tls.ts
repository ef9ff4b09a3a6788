import { webcrypto } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
// @peculiar/x509 resolves its parts through tsyringe, which needs the Reflect metadata API.
import "reflect-metadata";
import * as x509 from "@peculiar/x509";

x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);

type KeyPair = webcrypto.CryptoKeyPair;

/** PEM files of a test CA and the certificates it signed, for servers and clients on loopback. */
export interface TestCertificates {
  /** The CA that signed the others: what a peer that verifies trusts. */
  readonly caFile: string;
  /** For a server on 127.0.0.1 / localhost. */
  readonly serverCertFile: string;
  readonly serverKeyFile: string;
  /** For a client that must prove who it is (mutual TLS). */
  readonly clientCertFile: string;
  readonly clientKeyFile: string;
  /** A certificate and key no one trusts: signed by a CA of its own. */
  readonly strangerCertFile: string;
  readonly strangerKeyFile: string;
}

const ALGORITHM = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;

/**
 * Makes a CA and certificates it signs, in `dir`, with no tool but Node.js: for tests of
 * TLS between Holdfast and NATS, and between NATS servers. Valid for a day.
 */
export async function makeCertificates(dir: string): Promise<TestCertificates> {
  const notBefore = new Date(Date.now() - 60_000);
  const notAfter = new Date(Date.now() + 24 * 60 * 60_000);
  const keys = () => webcrypto.subtle.generateKey(ALGORITHM, true, ["sign", "verify"]) as Promise<KeyPair>;
  const selfSigned = async (name: string) => {
    const pair = await keys();
    const cert = await x509.X509CertificateGenerator.createSelfSigned({
      serialNumber: "01",
      name,
      notBefore,
      notAfter,
      signingAlgorithm: ALGORITHM,
      keys: pair,
      extensions: [
        new x509.BasicConstraintsExtension(true, 1, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      ],
    });
    return { cert, pair };
  };
  const ca = await selfSigned("CN=Holdfast test CA");
  const stranger = await selfSigned("CN=Nobody's CA");
  const leaf = async (issuer: typeof ca, name: string, serial: string) => {
    const pair = await keys();
    const cert = await x509.X509CertificateGenerator.create({
      serialNumber: serial,
      subject: name,
      issuer: issuer.cert.subject,
      notBefore,
      notAfter,
      signingAlgorithm: ALGORITHM,
      publicKey: pair.publicKey,
      signingKey: issuer.pair.privateKey,
      extensions: [
        new x509.SubjectAlternativeNameExtension([
          { type: "ip", value: "127.0.0.1" },
          { type: "dns", value: "localhost" },
        ]),
        new x509.ExtendedKeyUsageExtension([
          x509.ExtendedKeyUsage.serverAuth,
          x509.ExtendedKeyUsage.clientAuth,
        ]),
      ],
    });
    return { cert, pair };
  };
  const server = await leaf(ca, "CN=127.0.0.1", "02");
  const client = await leaf(ca, "CN=holdfast-client", "03");
  const strangerLeaf = await leaf(stranger, "CN=stranger", "04");
  const write = async (name: string, pem: string) => {
    const path = join(dir, name);
    await writeFile(path, pem, { mode: 0o600 });
    return path;
  };
  const keyPem = async (key: webcrypto.CryptoKey) =>
    x509.PemConverter.encode(await webcrypto.subtle.exportKey("pkcs8", key), "PRIVATE KEY");
  return {
    caFile: await write("ca.pem", ca.cert.toString("pem")),
    serverCertFile: await write("server.pem", server.cert.toString("pem")),
    serverKeyFile: await write("server-key.pem", await keyPem(server.pair.privateKey)),
    clientCertFile: await write("client.pem", client.cert.toString("pem")),
    clientKeyFile: await write("client-key.pem", await keyPem(client.pair.privateKey)),
    strangerCertFile: await write("stranger.pem", strangerLeaf.cert.toString("pem")),
    strangerKeyFile: await write("stranger-key.pem", await keyPem(strangerLeaf.pair.privateKey)),
  };
}
