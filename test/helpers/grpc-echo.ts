import * as grpc from '@grpc/grpc-js';
import protobuf from 'protobufjs';
import type { App } from './waypoint-fixture.js';

/**
 * A gRPC echo service for tests through the mesh, on @grpc/grpc-js (client and server) with
 * protobuf messages (protobufjs, from the JSON form of the .proto below, so nothing is
 * compiled or parsed at run time). Methods of `zmesh.test.Echo`:
 * `Echo`, `EchoTwo`, `EchoThree`, `Admin` (unary: answer with the serving app, the method and
 * the request metadata) and `Chat` (bidirectional: one answer per message, in order).
 */
export const ECHO_SERVICE = 'zmesh.test.Echo';

export interface EchoReply {
  app: string;
  method: string;
  metadata: Record<string, string>;
  text?: string;
  n?: number;
}

/**
 * package zmesh.test;
 * message EchoRequest { string text = 1; }
 * message EchoReply { string app = 1; string method = 2; map<string, string> metadata = 3;
 *                     string text = 4; uint32 n = 5; }
 */
const root = protobuf.Root.fromJSON({
  nested: {
    zmesh: {
      nested: {
        test: {
          nested: {
            EchoRequest: { fields: { text: { type: 'string', id: 1 } } },
            EchoReply: {
              fields: {
                app: { type: 'string', id: 1 },
                method: { type: 'string', id: 2 },
                metadata: { keyType: 'string', type: 'string', id: 3 } as protobuf.IMapField,
                text: { type: 'string', id: 4 },
                n: { type: 'uint32', id: 5 },
              },
            },
          },
        },
      },
    },
  },
});

function codec(type: protobuf.Type) {
  return {
    serialize: (v: unknown) =>
      Buffer.from(type.encode(type.fromObject(v as Record<string, unknown>)).finish()),
    deserialize: (b: Buffer) => type.toObject(type.decode(b), { defaults: true }),
  };
}
const request = codec(root.lookupType('zmesh.test.EchoRequest'));
const reply = codec(root.lookupType('zmesh.test.EchoReply'));

const UNARY = ['Echo', 'EchoTwo', 'EchoThree', 'Admin'] as const;

function method(name: string, stream: boolean): grpc.MethodDefinition<unknown, unknown> {
  return {
    path: `/${ECHO_SERVICE}/${name}`,
    requestStream: stream,
    responseStream: stream,
    requestSerialize: request.serialize,
    requestDeserialize: request.deserialize,
    responseSerialize: reply.serialize,
    responseDeserialize: reply.deserialize,
    originalName: name,
  };
}

const definition: grpc.ServiceDefinition = Object.fromEntries([
  ...UNARY.map((m) => [m, method(m, false)] as const),
  ['Chat', method('Chat', true)] as const,
]);

/** Each key's values joined with `,`, as an HTTP server would read repeated headers. */
function metadataOf(md: grpc.Metadata): Record<string, string> {
  const map = md.toJSON();
  return Object.fromEntries(Object.entries(map).map(([k, v]) => [k, v.map(String).join(',')]));
}

/** The echo service on `host:port`, shaped as the waypoint fixture's App. */
export async function startGrpcEcho(name: string, host: string, port: number): Promise<App> {
  const server = new grpc.Server();
  const app: App = { name, hits: 0, failWith: 0, close: () => server.forceShutdown() };
  const unary =
    (m: string): grpc.handleUnaryCall<unknown, EchoReply> =>
    (call, callback) => {
      app.hits++;
      const metadata = metadataOf(call.metadata);
      app.last = metadata;
      callback(null, { app: name, method: m, metadata });
    };
  const handlers: grpc.UntypedServiceImplementation = Object.fromEntries(UNARY.map((m) => [m, unary(m)]));
  handlers.Chat = ((call: grpc.ServerDuplexStream<{ text: string }, EchoReply>) => {
    app.hits++;
    const metadata = metadataOf(call.metadata);
    let n = 0;
    call.on('data', (msg: { text: string }) => {
      call.write({ app: name, method: 'Chat', metadata, text: msg.text, n: n++ });
    });
    call.on('end', () => call.end());
    call.on('error', () => {});
  }) as grpc.handleBidiStreamingCall<unknown, unknown>;
  server.addService(definition, handlers);
  await new Promise<void>((resolve, reject) =>
    server.bindAsync(`${host}:${port}`, grpc.ServerCredentials.createInsecure(), (e) =>
      e ? reject(e) : resolve(),
    ),
  );
  return app;
}

export type EchoClient = grpc.Client & {
  [m in (typeof UNARY)[number]]: (
    req: unknown,
    md: grpc.Metadata,
    opts: grpc.CallOptions,
    cb: (e: grpc.ServiceError | null, r?: EchoReply) => void,
  ) => grpc.ClientUnaryCall;
} & { Chat: (md: grpc.Metadata) => grpc.ClientDuplexStream<{ text: string }, EchoReply> };

const Client = grpc.makeGenericClientConstructor(definition, 'Echo');

/** A plaintext (h2c) client of `address`, sending `:authority` `authority`. */
export function echoClient(address: string, authority: string): EchoClient {
  return new Client(address, grpc.credentials.createInsecure(), {
    'grpc.default_authority': authority,
  }) as unknown as EchoClient;
}

export function metadata(values: Record<string, string> = {}): grpc.Metadata {
  const md = new grpc.Metadata();
  for (const [k, v] of Object.entries(values)) md.set(k, v);
  return md;
}

/** One unary call: the reply, or the gRPC status it failed with. */
export function call(
  client: EchoClient,
  m: (typeof UNARY)[number],
  md: Record<string, string> = {},
): Promise<{ code: number; reply?: EchoReply; details?: string }> {
  return new Promise((resolve) => {
    client[m]({}, metadata(md), { deadline: Date.now() + 10_000 }, (e, reply) =>
      resolve(e ? { code: e.code, details: e.details } : { code: 0, ...(reply ? { reply } : {}) }),
    );
  });
}
