import { NdjsonParser, ServerSentEventParser } from '../src/api/streams';

describe('ServerSentEventParser', () => {
  it('splits events and skips comments', () => {
    const parser = new ServerSentEventParser();
    const events = parser.push(
      ': heartbeat\n\nid: 3\nevent: metrics\ndata: {"a":1}\n\nevent: end\ndata: {}\n\n'
    );
    expect(events).toEqual([
      { event: 'metrics', data: '{"a":1}', id: '3' },
      { event: 'end', data: '{}', id: '3' }
    ]);
  });

  it('joins data lines, defaults the name to message, and reads CRLF and CR line ends', () => {
    const parser = new ServerSentEventParser();
    expect(parser.push('data: one\r\ndata:two\r\n\r\ndata: three\r\r\n')).toEqual([
      { event: 'message', data: 'one\ntwo', id: null },
      { event: 'message', data: 'three', id: null }
    ]);
  });

  it('waits for the rest of an event cut anywhere, a CRLF included', () => {
    const parser = new ServerSentEventParser();
    const text = 'event: state\r\ndata: {"state":"ACTIVE"}\r\n\r\n';
    const events = [];
    for (const char of text) {
      events.push(...parser.push(char));
    }
    expect(events).toEqual([{ event: 'state', data: '{"state":"ACTIVE"}', id: null }]);
  });

  it('waits after a CR that ends the text, which may be the first half of a CRLF', () => {
    const parser = new ServerSentEventParser();
    expect(parser.push('data: x\r\r')).toEqual([]);
    expect(parser.push('\n')).toEqual([{ event: 'message', data: 'x', id: null }]);
  });

  it('drops a name without data', () => {
    const parser = new ServerSentEventParser();
    expect(parser.push('event: lonely\n\ndata: x\n\n')).toEqual([
      { event: 'message', data: 'x', id: null }
    ]);
  });
});

describe('NdjsonParser', () => {
  it('parses complete lines and keeps the rest for later', () => {
    const parser = new NdjsonParser<{ id: number }>();
    expect(parser.push('{"id": 1}\n{"id"')).toEqual([{ id: 1 }]);
    expect(parser.push(': 2}\n\n{"id": 3}')).toEqual([{ id: 2 }]);
    expect(parser.flush()).toEqual([{ id: 3 }]);
    expect(parser.flush()).toEqual([]);
  });
});
