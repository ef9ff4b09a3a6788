// The key the global setup provides and `natsUrl()` injects; the augmentation below types both.
export const NATS_URL_KEY = "natsUrl";

declare module "vitest" {
  export interface ProvidedContext {
    natsUrl: string;
  }
}
