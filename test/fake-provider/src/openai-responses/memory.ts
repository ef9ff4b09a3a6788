/** What the fake keeps of a response it issued: enough to count a conversation that goes on from it. */
export interface RememberedResponse {
  readonly apiKey: string;
  /** The prompt it answered, the conversation before it included. */
  readonly inputTokens: number;
  readonly outputTokens: number;
}

/**
 * The responses the fake issued with `store` on, so `previous_response_id` can name one. Bounded:
 * past `capacity` the oldest is forgotten, like a response past OpenAI's retention.
 */
export class ResponseMemory {
  readonly #responses = new Map<string, RememberedResponse>();

  constructor(private readonly capacity = 10_000) {}

  remember(id: string, response: RememberedResponse): void {
    this.#responses.set(id, response);
    if (this.#responses.size > this.capacity) {
      const oldest = this.#responses.keys().next().value;
      if (oldest !== undefined) this.#responses.delete(oldest);
    }
  }

  /** The response, if it was stored for this key: another key's project cannot see it. */
  recall(apiKey: string, id: string): RememberedResponse | undefined {
    const response = this.#responses.get(id);
    return response?.apiKey === apiKey ? response : undefined;
  }
}
